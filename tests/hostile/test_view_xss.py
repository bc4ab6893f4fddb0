"""Hostile content in `edv view` (issue 32): transcripts and experiences hold model output,
so every string must reach the page as text. A real EDV run (tests/view/view_kit.py) stores a
lesson and a tool call (hence its tool result) holding a `<script>` tag, a `javascript:` link,
an `<img onerror>`, a `</textarea></script>` breakout and a RIGHT-TO-LEFT OVERRIDE; the pages
that show them — served (`make_app`, in process) and exported (`edv view RUN --html DIR`) —
are parsed as a browser would: no script, no event handler, no javascript: URL, no tag from
the data; the characters still readable as text; no raw bidi control. No browser needed
(tests/view/test_browser.py checks the same in chromium)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.view.view_kit import BIDI, BREAKOUT, IMG, JS_LINK, SCRIPT, export, make_run

SURFACES = ("memory_list", "memory_item", "tool_episode", "retrieving_episode")
SHOWN_WHOLE = ("memory_item", "tool_episode")  # pages that must show the payload as text
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
_CHAR_REF = re.compile(r"&#(x[0-9a-f]+|[0-9]+);?|&(rlm|lrm);", re.IGNORECASE)


def bidi_refs(html: str) -> list[str]:
    """Character references that decode to a bidi control (`&#x202e;`, `&#8238;`, `&rlm;`)."""
    out = []
    for m in _CHAR_REF.finditer(html):
        if m[2]:
            out.append(m[0])
            continue
        num = m[1]
        code = int(num[1:], 16) if num[0] in "xX" else int(num)
        if code < 0x110000 and BIDI_CONTROLS.match(chr(code)):
            out.append(m[0])
    return out


class Page(HTMLParser):
    """Tags, attributes and text as the browser's parser sees them."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.ends: list[str] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k.lower(): v or "" for k, v in attrs}))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        self.ends.append(tag)

    def handle_data(self, data):
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


@pytest.fixture(scope="module")
def run_dir(scripted, tmp_path_factory) -> Path:
    return make_run(scripted, tmp_path_factory)


@pytest.fixture(scope="module")
def ids(run_dir) -> dict[str, str]:
    from edv_ray.results.views import connect

    con = connect(run_dir)
    (item,) = con.execute("SELECT item_id FROM memory_items WHERE bank = 'shared'").fetchone()
    (tool_ep,) = con.execute("SELECT episode_id FROM episodes WHERE agent = 'bad' AND stage = 'execute' "
                             "ORDER BY task_id LIMIT 1").fetchone()
    (retr_ep,) = con.execute("SELECT episode_id FROM episodes WHERE list_contains(retrieved_item_ids, ?) "
                             "ORDER BY episode_id LIMIT 1", [item]).fetchone()
    return {"item": item, "tool_episode": tool_ep, "retrieving_episode": retr_ep}


@pytest.fixture(scope="module")
def served(run_dir, ids) -> dict[str, tuple[str, dict]]:
    """Each surface's HTML and headers from the app, in process."""
    from starlette.testclient import TestClient

    from edv_ray.view.app import make_app

    urls = {"memory_list": "/memory", "memory_item": f"/memory/{ids['item']}",
            "tool_episode": f"/episode/{ids['tool_episode']}",
            "retrieving_episode": f"/episode/{ids['retrieving_episode']}"}
    out = {}
    with TestClient(make_app([run_dir])) as client:
        for surface, url in urls.items():
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code)
            out[surface] = (resp.text, dict(resp.headers))
    return out


@pytest.fixture(scope="module")
def exported(run_dir, ids, tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """Each surface's page in the static export (found by the hooks the pages carry, since
    file names are made safe from ids)."""
    site = export(run_dir, tmp_path_factory)
    pages = {p: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}

    def one(pred, what):
        found = [html for p, html in sorted(pages.items()) if pred(p, html)]
        assert found, f"the export has no {what} page"
        return found[0]

    return {
        "memory_list": (one(lambda p, h: 'id="memory-items"' in h and f'data-item-id="{ids["item"]}"' in h,
                            "memory list"), {}),
        "memory_item": (one(lambda p, h: 'id="item-text"' in h and ids["item"] in p.name, "memory item"), {}),
        "tool_episode": (one(lambda p, h: 'id="transcript"' in h and ids["tool_episode"] in p.name,
                             "tool episode"), {}),
        "retrieving_episode": (one(lambda p, h: 'id="transcript"' in h and ids["retrieving_episode"] in p.name,
                                   "retrieving episode"), {}),
    }


def _page(request, where: str, surface: str) -> tuple[str, Page]:
    html, _ = request.getfixturevalue(where)[surface]
    return html, Page(html)


def _no_active_content(page: Page, where: str) -> None:
    for tag, attrs in page.tags:
        assert tag not in ("script", "iframe", "object", "embed", "base"), (where, tag, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (where, tag, name, value)
            if name in ("href", "src", "action", "formaction", "xlink:href", "srcdoc"):
                v = re.sub(r"[\s\x00-\x1f]", "", value).lower()
                assert not v.startswith(("javascript:", "vbscript:", "data:text/html")), (where, tag, name, value)


CASES = [(w, s) for w in ("served", "exported") for s in SURFACES]


@pytest.mark.parametrize(("where", "surface"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_script_tag_is_text(request, where, surface):
    html, page = _page(request, where, surface)
    _no_active_content(page, f"{where}/{surface}")
    assert "<script" not in html.lower()
    if surface in SHOWN_WHOLE:
        assert SCRIPT in page.all_text and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize(("where", "surface"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_javascript_link_is_text(request, where, surface):
    html, page = _page(request, where, surface)
    _no_active_content(page, f"{where}/{surface}")
    assert not re.search(r"""href\s*=\s*["']?\s*javascript:""", html, re.IGNORECASE)
    if surface in SHOWN_WHOLE:
        assert "javascript:alert(1)" in page.all_text
        assert surface != "memory_item" or JS_LINK in page.all_text


@pytest.mark.parametrize(("where", "surface"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_onerror_img_is_text(request, where, surface):
    html, page = _page(request, where, surface)
    _no_active_content(page, f"{where}/{surface}")
    assert not [a for t, a in page.tags if t == "img" and a.get("src") == "x"]
    assert "<img src=x" not in html
    if surface in SHOWN_WHOLE:
        assert IMG in page.all_text


@pytest.mark.parametrize(("where", "surface"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_textarea_and_script_breakout_is_text(request, where, surface):
    """`</textarea></script><script>` closes nothing: no element of the page ends early and
    no script starts."""
    html, page = _page(request, where, surface)
    _no_active_content(page, f"{where}/{surface}")
    assert BREAKOUT not in html and "</textarea></script>" not in html
    starts = [t for t, _ in page.tags]
    for tag in ("textarea", "script", "title", "style", "pre"):
        assert page.ends.count(tag) <= starts.count(tag), (where, surface, tag)
    if surface in SHOWN_WHOLE:
        assert BREAKOUT in page.all_text


@pytest.mark.parametrize(("where", "surface"), CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_bidi_override_is_not_raw(request, where, surface):
    """U+202E would make `evil\u202etxt.exe` read as `evilexe.txt`: it is shown visibly or
    dropped, never sent as the character (nor as a character reference to it)."""
    html, page = _page(request, where, surface)
    assert not BIDI_CONTROLS.search(html), (where, surface, BIDI_CONTROLS.findall(html)[:3])
    assert not bidi_refs(html), (where, surface, bidi_refs(html)[:3])
    if surface in SHOWN_WHOLE:
        text = page.all_text
        assert "evil" in text and "txt.exe" in text and BIDI not in text


def test_served_pages_forbid_every_script(served):
    for surface, (_, headers) in served.items():
        csp = {k.lower(): v for k, v in headers.items()}.get("content-security-policy", "")
        assert "default-src 'none'" in csp and "script-src" not in csp, (surface, csp)
