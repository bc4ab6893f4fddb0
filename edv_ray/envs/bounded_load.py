"""Bounds for reading a benchmark's data files: size, nesting depth and what an error echoes.

A data folder is user input. Without bounds a JSON array nested 10⁵ deep ends in a
RecursionError traceback, a 15 MB bad value is echoed into a 26 MB "one line", and a
file of any size is read into memory. Here:

* :func:`check_size` refuses a file over its cap before it is read;
* :func:`parse_json` turns every parse failure (a RecursionError deep inside the parser,
  an integer with more digits than Python converts) into one :class:`BenchmarkDataError`
  naming the file, and :func:`check_depth` refuses nesting deeper than :data:`MAX_DEPTH`
  (walked iteratively: the check itself cannot recurse);
* :func:`brief` is the only way a data value enters a message: at most
  :data:`ECHO_CHARS` characters, containers by type and length (never their repr, which
  recurses), huge integers by size (their repr is refused by Python).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edv_ray.envs.errors import BenchmarkDataError

MAX_DEPTH = 100  # the official records nest < 15 levels (Mind2Web, MMTB)
ECHO_CHARS = 200
GiB = 1 << 30


def brief(value: Any, limit: int = ECHO_CHARS) -> str:
    """A short, safe rendering of a data value for an error message."""
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (str, bytes)) and len(value) > limit:
        value = value[:limit]
        return repr(value)[:limit] + f"… ({type(value).__name__} cut at {limit})"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is named by type
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "…"


def check_size(path: Path, cap: int, what: str) -> None:
    """Refuse ``path`` when it holds more than ``cap`` bytes (checked before reading)."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise BenchmarkDataError(f"{path} cannot be read ({err.strerror or err})") from None
    if size > cap:
        raise BenchmarkDataError(f"{path} is {size:,} bytes, over the {cap:,}-byte limit for "
                                 f"{what}; is it the right file?")


def depth_over(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests dicts / lists deeper than ``limit`` (iterative)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        items = node.values() if isinstance(node, dict) else node
        for child in items:
            if isinstance(child, (dict, list)) and child:
                stack.append((child, depth + 1))
    return False


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    if isinstance(value, (dict, list)) and depth_over(value, limit):
        raise BenchmarkDataError(f"{where}: nested deeper than {limit} levels; the official "
                                 "records are shallow (a damaged or crafted file?)")


def parse_json(text: str | bytes, where: str, expected: str,
               limit: int = MAX_DEPTH) -> Any:
    """``json.loads`` with bounds: a JSONDecodeError is left to the caller (each reader
    words its line / column its own way); any other failure, and nesting deeper than
    ``limit``, is one BenchmarkDataError naming ``where``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise BenchmarkDataError(f"{where}: nested deeper than {limit} levels (the JSON "
                                 f"parser gave up); expected {expected}") from None
    except ValueError as err:  # e.g. an integer of more than 4,300 digits
        raise BenchmarkDataError(f"{where}: not usable JSON ({brief(str(err), 120)}); "
                                 f"expected {expected}") from None
    check_depth(value, where, limit)
    return value
