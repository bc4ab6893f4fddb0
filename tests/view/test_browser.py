"""`edv view` in a real browser (issue 32): Debian's chromium, headless, driven by Selenium
through Debian's chromium-driver (both from apt via scripts/install.sh; nothing downloaded).

On a small real EDV run (tests/view/conftest.py) a person's path is clicked through: the
Pass@1 table → the method's memory → one experience → a trajectory it was distilled from
and back → an episode that retrieved it → its memory block back to the experience. The
vote table is checked against the votes Parquet (DuckDB), the planted XSS payloads stay
text and nothing runs, and the static export (`edv view RUN --html DIR`) is opened from
file:// with the browser's network switched off. With EDV_SCREENSHOT=PATH set, the
experience page is saved there as a PNG (the README's docs/edv-view.png).

Without chromium / chromedriver / selenium these tests skip — except under CI (the CI
variable set), where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from edv_ray.results.views import connect
from tests.view.view_kit import (
    JS_LINK,
    SCRIPT,
    make_driver,
    require_browser,
    serving_many,
)

# slow: the calls alone take ~50 s here (two viewer processes, two browsers, two crawls)
# on top of the shared run; CI runs slow tests too
pytestmark = pytest.mark.slow
WAIT_S = 30


# ---- helpers --------------------------------------------------------------------------------
def _by():
    from selenium.webdriver.common.by import By
    return By


def wait_css(driver, css: str, timeout: float = WAIT_S):
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(EC.presence_of_element_located((_by().CSS_SELECTOR, css)))


def find(driver, css: str):
    return driver.find_elements(_by().CSS_SELECTOR, css)


def click_to(driver, link, expect_css: str):
    """Click ``link`` (scrolled into view) and wait for the next page's ``expect_css``
    (the old page gone first, so the wait is for the new one)."""
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
    old = driver.find_element(_by().TAG_NAME, "html")
    link.click()
    WebDriverWait(driver, WAIT_S).until(EC.staleness_of(old))
    return wait_css(driver, expect_css)


def no_alert(driver) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    pytest.fail(f"a JavaScript alert is open on {driver.current_url}: {text!r}")


def assert_inert(driver) -> None:
    """The page runs nothing of the data's: no alert, no <script> element, no javascript:
    link, no inline event handler, and the console shows no blocked inline script (a CSP
    refusal would mean markup from the data reached the DOM)."""
    no_alert(driver)
    found = driver.execute_script("""
        const bad = [];
        document.querySelectorAll('script').forEach(s => bad.push('script: ' + s.outerHTML.slice(0, 80)));
        document.querySelectorAll('[href], [src], [action], [formaction]').forEach(e => {
          for (const a of ['href', 'src', 'action', 'formaction']) {
            const v = (e.getAttribute(a) || '').replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase();
            if (v.startsWith('javascript:') || v.startsWith('vbscript:') || v.startsWith('data:text/html'))
              bad.push(a + ': ' + e.outerHTML.slice(0, 80));
          }
        });
        document.querySelectorAll('*').forEach(e => {
          for (const a of e.getAttributeNames()) if (a.toLowerCase().startsWith('on')) bad.push(a + ': ' + e.tagName);
        });
        document.querySelectorAll('iframe, object, embed').forEach(e => bad.push(e.tagName));
        return bad;""")
    assert not found, f"{driver.current_url}: active content in the page: {found}"
    refused = [e["message"] for e in driver.get_log("browser")
               if "Content Security Policy" in e["message"] or "Refused to" in e["message"]]
    assert not refused, f"{driver.current_url}: the CSP had to block something: {refused}"


def page_ids(driver, css: str, attr: str) -> list[str]:
    return [e.get_attribute(attr) for e in find(driver, css)]


def db(run_dir):
    return connect(run_dir)


def shared_item(run_dir) -> str:
    (item_id,) = db(run_dir).execute("SELECT item_id FROM memory_items WHERE bank = 'shared'").fetchone()
    return item_id


def expected_votes(run_dir, item_id: str) -> list[dict]:
    """The votes Parquet rows behind an item: the votes on every candidate whose decision
    admitted it or an item merged into it."""
    con = db(run_dir)
    (merged,) = con.execute("SELECT merged_item_ids FROM memory_items WHERE item_id = ?", [item_id]).fetchone()
    rows = con.execute(
        "SELECT v.verifier, v.approve, v.sees_reward, v.context_episode_ids FROM votes v "
        "WHERE v.candidate_id IN (SELECT candidate_id FROM decisions WHERE list_has_any(item_ids, ?))",
        [[item_id, *(merged or [])]]).fetchall()
    out = []
    for verifier, approve, sees, ctx in rows:
        ok = [r[0] for r in con.execute("SELECT success FROM episodes WHERE list_contains(?, episode_id)",
                                        [list(ctx or [])]).fetchall()]
        out.append({"verifier": verifier, "approve": approve, "sees_reward": sees, "context_success": ok})
    return out


_APPROVE = {"approve", "approved", "true", "yes", "✓", "1"}
_REJECT = {"reject", "rejected", "false", "no", "✗", "0"}


def vote_value(text: str) -> bool:
    t = text.strip().lower()
    assert t in _APPROVE | _REJECT, f"unreadable vote cell {text!r}"
    return t in _APPROVE


# ---- the click path ---------------------------------------------------------------------------
def test_pass_at_1_to_memory_to_sources_and_retrieving_episodes(browser, view_server, edv_run_dir):
    item_id = shared_item(edv_run_dir)
    con = db(edv_run_dir)
    (sources,) = con.execute("SELECT list_concat(supporting_trajectory_ids, rejected_trajectory_ids) "
                             "FROM memory_items WHERE item_id = ?", [item_id]).fetchone()
    retrievers = {r[0] for r in con.execute(
        "SELECT episode_id FROM episodes WHERE list_contains(retrieved_item_ids, ?)", [item_id]).fetchall()}
    assert retrievers, "the fixture run retrieved nothing"

    browser.get(view_server)
    wait_css(browser, "table#pass-at-1")
    assert_inert(browser)
    methods = set(page_ids(browser, "table#pass-at-1 tr[data-method]", "data-method"))
    assert {"edv", "no_memory"} <= methods, methods
    for table in ("ability-matrix", "tokens", "validity"):
        assert find(browser, f"table#{table}"), f"the overview has no table#{table}"

    # Pass@1 → the method's memory
    link = browser.find_element(_by().CSS_SELECTOR, 'table#pass-at-1 tr[data-method="edv"] a.method-memory')
    click_to(browser, link, "table#memory-items")
    listed = page_ids(browser, "tr.memory-item", "data-item-id")
    stored = {r[0] for r in con.execute("SELECT item_id FROM memory_items WHERE method = 'edv'").fetchall()}
    assert stored <= set(listed), f"items missing from the list: {stored - set(listed)}"
    assert_inert(browser)

    # → one experience
    link = browser.find_element(_by().CSS_SELECTOR, f'tr.memory-item[data-item-id="{item_id}"] a.item-link')
    click_to(browser, link, "#item-text")
    item_url = browser.current_url
    text = browser.find_element(_by().CSS_SELECTOR, "#item-text").text
    assert "always confirm the task id" in text and SCRIPT in text and JS_LINK in text, text
    assert "shared" in browser.find_element(_by().CSS_SELECTOR, "#admitted").text.lower()
    stats = browser.find_element(_by().CSS_SELECTOR, "#retrieval-stats").text
    assert str(len(retrievers)) in stats, stats
    assert_inert(browser)
    if os.environ.get("EDV_SCREENSHOT"):
        save_screenshot(browser, Path(os.environ["EDV_SCREENSHOT"]))

    # → the trajectories it was distilled from (each one), and back
    linked = page_ids(browser, "ul#sources a.source-episode", "data-episode-id")
    assert set(sources) <= set(linked), f"sources not linked: {set(sources) - set(linked)}"
    for episode_id in sources:
        link = browser.find_element(_by().CSS_SELECTOR, f'ul#sources a.source-episode[data-episode-id="{episode_id}"]')
        click_to(browser, link, "#transcript")
        assert episode_id in browser.page_source
        assert find(browser, "#transcript .msg"), "an empty transcript"
        assert find(browser, "#grade")
        assert_inert(browser)
        browser.back()
        wait_css(browser, "#item-text")
        assert browser.current_url == item_url

    # → an episode that retrieved it, whose memory block links back to it
    linked = set(page_ids(browser, "ul#retrieved-by a.retrieving-episode", "data-episode-id"))
    assert linked == retrievers, (linked, retrievers)
    episode_id = min(linked)
    link = browser.find_element(_by().CSS_SELECTOR,
                                f'ul#retrieved-by a.retrieving-episode[data-episode-id="{episode_id}"]')
    click_to(browser, link, "#memory-block")
    refs = page_ids(browser, "#memory-block a.memory-ref", "data-item-id")
    (want,) = con.execute("SELECT retrieved_item_ids FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
    assert refs == list(want), (refs, want)
    assert_inert(browser)
    link = browser.find_element(_by().CSS_SELECTOR, f'#memory-block a.memory-ref[data-item-id="{item_id}"]')
    click_to(browser, link, "#item-text")
    assert browser.current_url == item_url

    # every page leads home
    click_to(browser, browser.find_element(_by().CSS_SELECTOR, "nav#top a"), "table#pass-at-1")


def save_screenshot(driver, path: Path) -> None:
    """The whole page (beyond the window) as a PNG, through the DevTools protocol."""
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path.write_bytes(base64.b64decode(shot["data"]))


# ---- votes against the Parquet ----------------------------------------------------------------
def test_vote_table_matches_the_votes_parquet(browser, view_server, edv_run_dir):
    items = [r[0] for r in db(edv_run_dir).execute(
        "SELECT item_id FROM memory_items WHERE method = 'edv' ORDER BY bank, item_id").fetchall()]
    assert len(items) >= 2
    for item_id in items:
        browser.get(urljoin(view_server, f"memory/{item_id}"))
        wait_css(browser, "table#votes")
        rows = find(browser, "table#votes tr.vote")
        shown = Counter()
        for row in rows:
            value = vote_value(row.find_element(_by().CSS_SELECTOR, "td.vote-value").text)
            reward = row.find_element(_by().CSS_SELECTOR, "td.vote-reward-shown").text.lower()
            shown[(row.get_attribute("data-verifier"), value, reward)] += 1
        want = Counter()
        for v in expected_votes(edv_run_dir, item_id):
            want[(v["verifier"], v["approve"])] += 1
        got = Counter({k[:2]: 0 for k in shown})
        for k, n in shown.items():
            got[k[:2]] += n
        assert +got == +want, f"{item_id}: page {dict(got)} vs Parquet {dict(want)}"
        # the reward a verifier was shown: the grade of its context runs, or nothing when hidden
        for v in expected_votes(edv_run_dir, item_id):
            cells = [k[2] for k in shown if k[0] == v["verifier"] and k[1] == v["approve"]]
            if not v["sees_reward"]:
                assert any("success" not in c and "fail" not in c for c in cells), (item_id, cells)
            elif v["context_success"]:
                word = "success" if all(v["context_success"]) else "fail"
                assert any(word in c for c in cells), (item_id, v, cells)


# ---- hostile content stays text ---------------------------------------------------------------
def test_xss_payloads_are_text_and_nothing_runs(browser, view_server, edv_run_dir):
    item_id = shared_item(edv_run_dir)
    (bad_episode,) = db(edv_run_dir).execute(
        "SELECT episode_id FROM episodes WHERE agent = 'bad' AND stage = 'execute' ORDER BY task_id LIMIT 1"
    ).fetchone()
    browser.get(urljoin(view_server, "memory/" + item_id))
    wait_css(browser, "#item-text")
    assert_inert(browser)
    text = browser.execute_script("return document.querySelector('#item-text').textContent")
    assert SCRIPT in text and JS_LINK in text  # shown as the characters the model wrote
    assert not find(browser, "#item-text a, #item-text script, #item-text img")

    browser.get(urljoin(view_server, "episode/" + bad_episode))
    wait_css(browser, "#transcript")
    assert_inert(browser)
    transcript = browser.execute_script("return document.querySelector('#transcript').textContent")
    assert transcript.count("alert(1)") >= 2, "the tool call and its result should both show the payload"
    assert find(browser, "#transcript .tool-call")
    assert find(browser, '#transcript .msg[data-role="tool"]')
    for page in ("", "memory", "memory?bank=shared"):
        browser.get(urljoin(view_server, page))
        wait_css(browser, "nav#top")
        assert_inert(browser)


def test_every_response_forbids_scripts(view_server, edv_run_dir):
    import urllib.request

    for page in ("", "memory", "memory/" + shared_item(edv_run_dir)):
        with urllib.request.urlopen(urljoin(view_server, page), timeout=30) as resp:
            csp = resp.headers.get("Content-Security-Policy", "")
        directives = {d.strip().split(" ")[0]: d.strip() for d in csp.split(";") if d.strip()}
        assert directives.get("default-src") == "default-src 'none'", csp
        assert "script-src" not in directives, csp


def crawl(base: str, limit: int = 400) -> tuple[set[str], list[str]]:
    """Every same-origin page reachable from ``base`` (up to ``limit``), and the broken
    links (with the page that links them)."""
    import urllib.error
    import urllib.request

    seen, queue, broken = {base}, [base], []
    referrer: dict[str, str] = {}
    while queue and len(seen) <= limit:
        url = queue.pop(0)
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                html = resp.read().decode("utf-8", "replace") if "html" in resp.headers.get("Content-Type", "") else ""
        except urllib.error.HTTPError as e:
            broken.append(f"{url}: {e.code} (linked from {referrer.get(url)})")
            continue
        parser = _Links()
        parser.feed(html)
        for link in parser.links:
            target = urljoin(url, link).split("#")[0]
            if target.startswith(base) and target not in seen:
                seen.add(target)
                referrer[target] = url
                queue.append(target)
    return seen, broken


def test_every_link_on_the_served_pages_resolves(view_server):
    """A crawl from the overview (same origin, up to 400 pages): no link leads to an error."""
    _, broken = crawl(view_server)
    assert not broken, broken[:10]


def test_several_runs_and_compare(browser, edv_run_dir, tmp_path):
    """`edv view RUN_A RUN_B`: `/` lists both, each run's pages live under `/r/<i>/` (every
    link resolves), the Compare page opens; nothing of the data runs."""
    other = tmp_path / "view-copy"
    shutil.copytree(edv_run_dir, other)
    with serving_many([edv_run_dir, other]) as base:
        seen, broken = crawl(base, limit=150)
        assert not broken, broken[:10]
        assert any("/r/1/" in u for u in seen), sorted(seen)[:20]
        for page in ("", "r/1/", "compare"):
            browser.get(urljoin(base, page))
            wait_css(browser, "nav#top")
            assert_inert(browser)
        browser.get(urljoin(base, "compare"))
        wait_css(browser, "table#paired-verdicts")
        browser.get(urljoin(base, "r/1/"))
        wait_css(browser, "table#pass-at-1")
        link = browser.find_element(_by().CSS_SELECTOR, 'table#pass-at-1 tr[data-method="edv"] a.method-memory')
        click_to(browser, link, "table#memory-items")
        assert "/r/1/" in browser.current_url


# ---- the static export, offline -----------------------------------------------------------------
class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.links.append(value)


def test_static_export_links_are_relative_and_resolve(static_export):
    pages = sorted(static_export.rglob("*.html"))
    assert len(pages) > 5, pages
    broken = []
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            url = urlparse(link)
            assert not url.scheme and not url.netloc and not link.startswith("/"), f"{page}: {link!r}"
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if not target.exists() or not target.resolve().is_relative_to(static_export.resolve()):
                broken.append(f"{page.relative_to(static_export)} → {link}")
    assert not broken, broken[:10]


def test_static_export_opens_offline(static_export, edv_run_dir):
    require_browser()
    driver = make_driver()
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        item_id = shared_item(edv_run_dir)
        driver.get((static_export / "index.html").as_uri())
        wait_css(driver, "table#pass-at-1")
        assert_inert(driver)
        link = driver.find_element(_by().CSS_SELECTOR, 'table#pass-at-1 tr[data-method="edv"] a.method-memory')
        click_to(driver, link, "table#memory-items")
        link = driver.find_element(_by().CSS_SELECTOR, f'tr.memory-item[data-item-id="{item_id}"] a.item-link')
        click_to(driver, link, "#item-text")
        assert SCRIPT in driver.find_element(_by().CSS_SELECTOR, "#item-text").text
        assert_inert(driver)
        item_url = driver.current_url
        link = find(driver, "ul#sources a.source-episode")[0]
        click_to(driver, link, "#transcript")
        assert_inert(driver)
        driver.back()
        wait_css(driver, "#item-text")
        assert driver.current_url == item_url
        retrieving = find(driver, "ul#retrieved-by a.retrieving-episode")
        assert retrieving, "the export lists no episode that retrieved the item"
        click_to(driver, retrieving[0], "#memory-block")
        link = driver.find_element(_by().CSS_SELECTOR, f'#memory-block a.memory-ref[data-item-id="{item_id}"]')
        click_to(driver, link, "#item-text")
        click_to(driver, driver.find_element(_by().CSS_SELECTOR, "nav#top a"), "table#pass-at-1")
        # the stylesheet came from the folder; nothing went to the network
        sheets = driver.execute_script("return Array.from(document.styleSheets).map(s => s.href)")
        assert all(h is None or h.startswith("file://") for h in sheets), sheets
        requests = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
        remote = [m["params"]["request"]["url"] for m in requests if m.get("method") == "Network.requestWillBeSent"
                  and re.match(r"(?i)(https?|wss?|ftp)://", m["params"]["request"]["url"])]
        assert not remote, remote
    finally:
        driver.quit()
