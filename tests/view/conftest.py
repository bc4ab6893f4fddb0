"""Fixtures for the `edv view` tests (issue 32); what they build is in view_kit.py."""

from __future__ import annotations

import pytest

from tests.view.view_kit import export, make_driver, make_run, require_browser, serving


@pytest.fixture(scope="session")
def edv_run_dir(scripted, tmp_path_factory):
    """A small real EDV + No-Memory run with hostile strings planted (view_kit.make_run)."""
    return make_run(scripted, tmp_path_factory)


@pytest.fixture(scope="session")
def view_server(edv_run_dir):
    """`edv view RUN` serving on a free port of 127.0.0.1: its base URL."""
    with serving(edv_run_dir) as base:
        yield base


@pytest.fixture(scope="session")
def static_export(edv_run_dir, tmp_path_factory):
    """The folder `edv view RUN --html DIR` wrote."""
    return export(edv_run_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium (Selenium, chromium-driver); skips without one, fails under CI."""
    require_browser()
    driver = make_driver()
    try:
        yield driver
    finally:
        driver.quit()
