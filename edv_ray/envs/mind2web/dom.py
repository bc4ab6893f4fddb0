"""Candidate elements of a Mind2Web page, read from ``cleaned_html`` (stdlib only).

MindAct prunes the DOM to the round's candidates and shows each option as a short
rendering of its element; here each candidate element is found by its
``backend_node_id`` attribute and rendered as ``(tag attr=value … text)``, cut to a
word budget. Options are listed in DOM order, as the reference code does.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from html.parser import HTMLParser

from edv_ray.envs.mind2web.data import Candidate

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
         "param", "source", "track", "wbr"}
_SHOWN_ATTRS = ("type", "name", "id", "aria_label", "aria-label", "placeholder", "value",
                "title", "alt", "role", "label", "href")


@dataclass
class Element:
    node_id: str
    order: int
    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, Element | None]] = []
        self.elements: dict[str, Element] = {}

    def _open(self, tag: str, attrs: list[tuple[str, str | None]]) -> Element | None:
        amap = {k: (v or "") for k, v in attrs}
        node_id = amap.pop("backend_node_id", None)
        if node_id is None or node_id in self.elements:
            return None
        el = Element(node_id, len(self.elements), tag, amap)
        self.elements[node_id] = el
        return el

    def handle_starttag(self, tag, attrs):
        el = self._open(tag, attrs)
        if tag not in _VOID:
            self.stack.append((tag, el))

    def handle_startendtag(self, tag, attrs):
        self._open(tag, attrs)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        words = data.split()
        if not words:
            return
        for _, el in self.stack:
            if el is not None:
                el.text.extend(words)


def index_elements(cleaned_html: str) -> dict[str, Element]:
    parser = _Collector()
    with contextlib.suppress(Exception):  # a broken page only loses its renderings
        parser.feed(cleaned_html or "")
        parser.close()
    return parser.elements


def render_element(el: Element | None, cand: Candidate, max_words: int = 12) -> str:
    """``(tag attr=value … text)`` cut to ``max_words`` words."""
    if el is not None:
        tag, attrs, text = el.tag, el.attrs, el.text
    else:  # not in the page text: fall back to the candidate record
        tag, text = cand.tag or "element", []
        attrs = {k: str(v) for k, v in cand.attributes.items() if k != "backend_node_id"}
    parts = [tag]
    for key in _SHOWN_ATTRS:
        val = " ".join(str(attrs.get(key, "")).split())
        if val:
            parts.append(f"{key}={val}")
    words = " ".join(parts + text).split()
    return "(" + " ".join(words[:max_words]) + (" …" if len(words) > max_words else "") + ")"


def dom_order(cands: list[str], elements: dict[str, Element]) -> list[str]:
    """Candidate ids sorted by their position in the page (unknown ids last, stable)."""
    far = len(elements) + 1
    return sorted(cands, key=lambda c: elements[c].order if c in elements else far)
