"""Build each τ²-bench tool's schema once per process instead of once per episode.

τ²-bench makes a fresh ``Tool`` for every toolkit method whenever tools are listed, and
``Tool.parse_data`` parses the docstring and builds two pydantic models with
``create_model`` every time. Our agents already take their tool lists from a per-process
cache (``episode.episode_tools``), but τ²-bench lists them again inside its own code
(``Environment.set_solo_mode`` validates the tools, the solo agent builds its stop tool):
tens of model classes per episode, all identical to the last episode's. py-spy put it at
~13 % of an episode worker's CPU at 128 episodes in flight (``experiments/bench/scale.py``).

``parse_data`` depends only on the function's signature, its docstring and the names of the
predefined arguments, so its result is memoised on exactly those. The pydantic model classes
it returns are immutable and shared; the lists in the result are copied per call. A key that
cannot be hashed (an unhashable default) falls back to τ²-bench's own parse.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_INSTALLED = False
_CACHE: dict[tuple, dict[str, Any]] = {}
ORIGINAL = None  # τ²-bench's own parse_data (plain function of cls, sig, doc, predefined)


def install() -> None:
    """Memoise ``tau2.environment.tool.Tool.parse_data`` in this process (idempotent)."""
    global _INSTALLED, ORIGINAL
    with _LOCK:
        if _INSTALLED:
            return
        from tau2.environment.tool import Tool

        original = ORIGINAL = Tool.parse_data.__func__

        def parse_data(cls, sig, docstring, predefined):
            try:
                key = (cls, sig, docstring, frozenset(predefined))
                hash(key)
            except TypeError:
                return original(cls, sig, docstring, predefined)
            data = _CACHE.get(key)
            if data is None:
                data = original(cls, sig, docstring, predefined)
                with _LOCK:
                    _CACHE[key] = data
            return {k: list(v) if isinstance(v, list) else v for k, v in data.items()}

        Tool.parse_data = classmethod(parse_data)
        _INSTALLED = True


def cached_schemas() -> int:
    """How many distinct tool signatures have been parsed (for tests)."""
    return len(_CACHE)
