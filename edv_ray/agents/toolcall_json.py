"""JSON objects in a model's text answer, found in bounded (linear) work.

A model's text may hold anything: 400 KB of ``{``, an object nested 1,000 deep, JSON
that never closes. Reading tool calls out of it must end quickly and never raise, so
that a hostile answer is what it is — a malformed tool call, an agent failure the
benchmark grades — and never an infrastructure error. The bounds:

* only the first ``MAX_SCAN_CHARS`` characters are read;
* an object is parsed in a window that grows by doubling from its opening brace (the
  decoder's work on a failed candidate is bounded by the window, never the rest of the
  text), and what the decoder reads over all candidates may reach at most
  ``WORK_PER_CHAR`` × the text (+ a constant), and at most ``MAX_FAILED`` candidates
  may fail: past either the scan stops (a candidate is a ``{`` followed by a key or
  ``}``, found by one regular-expression search: 400 KB of ``{`` holds none);
* nesting deeper than ``MAX_DEPTH`` is refused: an object nested deeper is skipped, and
  one deep enough to exhaust the decoder's recursion ends the scan (the answer is hostile).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_SCAN_CHARS = 1_000_000  # the head of an answer read for tool calls
MAX_DEPTH = 64  # nesting of a tool call's JSON (objects and lists)
WORK_PER_CHAR = 16  # characters decoded, at most, per character scanned
MAX_FAILED = 10_000  # candidate objects that did not parse before the scan gives up
FIRST_WINDOW = 256
REPAIR = "}}}"  # a truncated object at the end may be closed by up to three braces

_DECODER = json.JSONDecoder()
_START = re.compile(r'\{\s*["}]')  # where an object can start: `{` then a key or `}`


@dataclass
class ScanStats:
    """What one scan cost (characters read by the decoder) and why it stopped early."""

    chars: int = 0
    work: int = 0
    stopped: str | None = None  # "budget" | "depth" | None


def depth_within(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` (parsed JSON) nests at most ``limit`` containers deep (iterative)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return False
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return True


def loads_bounded(text: str, limit: int = MAX_DEPTH, max_chars: int = MAX_SCAN_CHARS) -> Any:
    """``json.loads`` for untrusted text: ``ValueError`` (never RecursionError) for text
    that is not JSON, longer than ``max_chars`` or nested deeper than ``limit``."""
    if len(text) > max_chars:
        raise ValueError(f"JSON longer than {max_chars} characters")
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    if not depth_within(obj, limit):
        raise ValueError(f"JSON nested deeper than {limit}")
    return obj


def _decode_at(text: str, pos: int, stats: ScanStats, budget: int) -> tuple[Any, int] | str:
    """Decode the object starting at ``pos`` in windows that double; (object, end) or why
    not: "bad" (not an object here), "end" (it runs past the end of the text), "budget",
    "depth"."""
    size = FIRST_WINDOW
    while True:
        window = text[pos:pos + size]
        try:
            obj, end = _DECODER.raw_decode(window)
            stats.work += end
            return obj, pos + end
        except RecursionError:
            return "depth"
        except ValueError as err:
            at = getattr(err, "pos", 0)
            stats.work += at + 1  # what the decoder read before it stopped
            if stats.work > budget:
                return "budget"
            if pos + size >= len(text):  # the window holds the rest of the text
                return "end" if at >= len(window.rstrip()) else "bad"
            # the window may have cut the object (inside a string, a number, a literal)
            if at < len(window) - 16 and not str(err).startswith("Unterminated string"):
                return "bad"
            stats.work += max(0, len(window) - at - 1)  # it read the window: a larger one
        size *= 2


def json_objects(text: str, stats: ScanStats | None = None) -> Iterator[Any]:
    """Every top-level JSON object in ``text``, in order, within the bounds above. A
    truncated object at the end (small models often drop the last brace) is repaired by
    closing it with up to three braces, if that parses. A candidate that fails is left
    for the next ``{`` after its opening brace (an object inside broken text is found)."""
    stats = stats if stats is not None else ScanStats()
    text = text[:MAX_SCAN_CHARS]
    stats.chars = len(text)
    budget = WORK_PER_CHAR * len(text) + 64 * FIRST_WINDOW
    repaired: str | None = None
    failed = 0

    def start(at: int) -> int:
        m = _START.search(text, at)
        return m.start() if m else -1

    pos = start(0)
    while pos != -1:
        got = _decode_at(text, pos, stats, budget)
        if got == "end":  # truncated at the end: close it (once per candidate, bounded)
            repaired = repaired if repaired is not None else text.rstrip() + REPAIR
            tail = repaired[pos:]
            stats.work += len(tail)
            if stats.work > budget:
                got = "budget"
            else:
                try:
                    obj, _ = _DECODER.raw_decode(tail)
                    got = (obj, len(text))
                except RecursionError:
                    got = "depth"
                except ValueError:
                    got = "bad"
        if got == "bad":
            failed += 1
            if failed > MAX_FAILED:
                got = "budget"
        if got in ("budget", "depth"):
            stats.stopped = got
            return
        if isinstance(got, tuple):
            obj, end = got
            if depth_within(obj):
                yield obj
            pos = start(end)
        else:
            pos = start(pos + 1)
