"""`edv view RUN --html DIR` in a real browser (see test_browser.py): every link of the
static export is relative and resolves, and the export opens from file:// with the
browser's network switched off.

Without chromium / chromedriver / selenium these tests skip — except under CI (the CI
variable set), where they fail.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote, urlparse

import pytest

from tests.view.browser_kit import _Links, _by, assert_inert, click_to, find, shared_item, wait_css
from tests.view.view_kit import SCRIPT, make_driver, require_browser

pytestmark = pytest.mark.slow


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
