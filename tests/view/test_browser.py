"""`edv view` in a real browser (issue 32): Debian's chromium, headless, driven by Selenium
through Debian's chromium-driver (both from apt via scripts/install.sh; nothing downloaded).

On a small real EDV run (tests/view/conftest.py) a person's path is clicked through: the
Pass@1 table → the method's memory → one experience → a trajectory it was distilled from
and back → an episode that retrieved it → its memory block back to the experience. The
vote table is checked against the votes Parquet (DuckDB), the planted XSS payloads stay
text and nothing runs (the static export's tests: test_browser_export.py). With EDV_SCREENSHOT=PATH set, the
experience page is saved there as a PNG (the README's docs/edv-view.png).

Without chromium / chromedriver / selenium these tests skip — except under CI (the CI
variable set), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import urljoin

import pytest

from tests.view.browser_kit import (_by, assert_inert, click_to, crawl, db, expected_votes, find, page_ids,
                                    save_screenshot, shared_item, vote_value, wait_css)
from tests.view.view_kit import (
    JS_LINK,
    SCRIPT,
    serving_many,
)

# slow: the calls alone take ~50 s here (two viewer processes, two browsers, two crawls)
# on top of the shared run; CI runs slow tests too
pytestmark = pytest.mark.slow


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
