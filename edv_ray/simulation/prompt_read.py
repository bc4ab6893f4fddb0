"""Reading what a request shows: the experiences block of an agent's system prompt, the
run / attempt blocks and sections of a stage prompt. Tolerant by design: unknown
attributes are ignored, and a prompt that shows nothing readable yields nothing."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

_EXPERIENCES = re.compile(r"<experiences>(.*?)</experiences>", re.DOTALL)
_NUMBERED = re.compile(r"^\s*(\d+)\.\s", re.MULTILINE)
# a block opens at the start of a line (instructions mention "<run> blocks" mid-sentence)
_BLOCK = re.compile(r"^<(run|attempt)((?:\s+[\w-]+=\"[^\"]*\")*)\s*>(.*?)</\1>",
                    re.DOTALL | re.MULTILINE)
_ATTR = re.compile(r"([\w-]+)=\"([^\"]*)\"")
_AT_MOST = re.compile(r"at most (\d+)", re.IGNORECASE)


def text_of(messages: list[dict[str, Any]], role: str) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == role)


def experience_items(system: str) -> list[str]:
    """The items of the ``<experiences>`` block, in prompt order: entries numbered 1, 2, …
    (a line starting ``N. `` only opens an item when N is the next number)."""
    found = _EXPERIENCES.search(system or "")
    if not found:
        return []
    body = found.group(1)
    starts, expect = [], 1
    for m in _NUMBERED.finditer(body):
        if int(m.group(1)) == expect:
            starts.append(m.start())
            expect += 1
    return [body[a:b].strip() for a, b in zip(starts, starts[1:] + [len(body)])]


@dataclass
class Block:
    kind: str  # run | attempt
    attrs: dict[str, str] = field(default_factory=dict)
    body: str = ""

    @property
    def label(self) -> str:
        return self.attrs.get("label", "")


def blocks(prompt: str) -> list[Block]:
    return [Block(m.group(1), dict(_ATTR.findall(m.group(2))), m.group(3))
            for m in _BLOCK.finditer(prompt or "")]


def section(prompt: str, name: str) -> str:
    """Unescaped text inside ``<name>…</name>`` (empty when absent)."""
    m = re.search(rf"<{name}>(.*?)</{name}>", prompt or "", re.DOTALL)
    return html.unescape(m.group(1)).strip() if m else ""


def without_blocks(prompt: str) -> str:
    return _BLOCK.sub("", prompt or "")


def at_most(prompt: str) -> int | None:
    m = _AT_MOST.search(prompt or "")
    return int(m.group(1)) if m else None
