"""What the browser tests share: waiting for and clicking page elements, checking that a
page runs nothing, the run's votes as DuckDB reads them, and a crawler of a page's links."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import pytest

from edv_ray.results.views import connect

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


def save_screenshot(driver, path: Path) -> None:
    """The whole page (beyond the window) as a PNG, through the DevTools protocol."""
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path.write_bytes(base64.b64decode(shot["data"]))


# ---- votes against the Parquet ----------------------------------------------------------------


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


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.links.append(value)
