"""A server's token ``usage``, checked before it is believed.

A server reports what a call cost; the report is input like any other. A count must be
a whole number from 0 to ``MAX_TOKENS`` (an int, or a float or string holding one — a
bool is not a count). Anything else — missing, null, negative, fractional, 10³⁰ (which
Parquet's int64 cannot even hold), text — makes that count *unknown*: stored as null
with ``usage_invalid`` set on the call row, never as 0, and counted apart by the token
views (``usage_unknown``), so a lying server can neither shrink nor blow up the cost
tables, nor lose the call row.
"""

from __future__ import annotations

import math
from typing import Any

MAX_TOKENS = 2**31 - 1  # far above any context window: a larger count is not a count


def token_count(value: Any) -> int | None:
    """``value`` as a token count, or None when it is not one (see the module doc)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 12:
            return None
        value = int(text)
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    elif not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_TOKENS else None


def read_usage(usage: Any) -> tuple[int | None, int | None, bool]:
    """(prompt tokens, completion tokens, invalid) from a response's ``usage`` (an object
    or a mapping); ``invalid``: either count is unknown."""
    def field(name: str) -> Any:
        if isinstance(usage, dict):
            return usage.get(name)
        return getattr(usage, name, None)

    pt, ct = token_count(field("prompt_tokens")), token_count(field("completion_tokens"))
    return pt, ct, pt is None or ct is None
