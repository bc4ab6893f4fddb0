"""A valid object for any JSON schema (for roles the engine has no model of).

Handles what pydantic emits: ``$ref``/``$defs``, ``anyOf``/``oneOf`` (the first non-null
branch), ``enum``/``const``, objects (every property), arrays (one element, or
``minItems``), strings, integers and numbers within ``minimum``/``maximum``, booleans.
Lengths are not in the schemas the framework sends (it strips them for constrained
decoding), so strings are short sentences drawn from the prompt's words. Fields that hold
an experience's text (``rule``, ``content``, …) get the caller's truth tag appended.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from edv_ray.simulation.codec import uniform

TAGGED_FIELDS = ("rule", "content", "lesson", "experience", "text", "strategy")
_SHORT_FIELDS = ("pick", "label", "id", "name", "status", "answer", "choice")


def number(node: dict[str, Any], integer: bool, u: float) -> int | float:
    """A number within the node's bounds (inclusive or exclusive)."""
    step = 1 if integer else 1e-6
    lo, hi = node.get("minimum"), node.get("maximum")
    if lo is None and "exclusiveMinimum" in node:
        lo = node["exclusiveMinimum"] + step
    if hi is None and "exclusiveMaximum" in node:
        hi = node["exclusiveMaximum"] - step
    lo = 0 if lo is None else lo
    hi = lo + 10 if hi is None else hi
    value = lo + (hi - lo) * u
    return max(math.ceil(lo), min(math.floor(hi), round(value))) if integer else value


def fill(schema: dict[str, Any], words: list[str], key: str,
         tag: Callable[[str], str] | None = None) -> Any:
    """An instance of ``schema``; ``tag(field)`` returns the tag text for a tagged field."""
    defs = schema.get("$defs") or schema.get("definitions") or {}
    words = words or ["noted"]

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while isinstance(node, dict) and "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        return node if isinstance(node, dict) else {}

    def sentence(path: str, n: int) -> str:
        start = int(uniform(key, path, "start") * len(words))
        return " ".join(words[(start + i) % len(words)] for i in range(n)).capitalize()

    def make(node: dict[str, Any], path: str, name: str) -> Any:
        node = resolve(node)
        for branch in ("anyOf", "oneOf"):
            if branch in node:
                options = [resolve(o) for o in node[branch]]
                options = [o for o in options if o.get("type") != "null"] or options
                return make(options[0], path, name)
        if node.get("allOf"):
            return make(node["allOf"][0], path, name)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            values = node["enum"]
            return values[min(len(values) - 1, int(uniform(key, path, "enum") * len(values)))]
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if kind == "object" or "properties" in node:
            return {k: make(v, f"{path}.{k}", k) for k, v in (node.get("properties") or {}).items()}
        if kind == "array":
            n = max(1, int(node.get("minItems", 1)))
            return [make(node.get("items") or {"type": "string"}, f"{path}[{i}]", name)
                    for i in range(n)]
        if kind == "boolean":
            return uniform(key, path, "bool") < 0.5
        if kind in ("integer", "number"):
            return number(node, kind == "integer", uniform(key, path, "num"))
        short = name.lower() in _SHORT_FIELDS
        text = sentence(path, 1 if short else 12)
        if tag is not None and name.lower() in TAGGED_FIELDS:
            text = f"{text}. {tag(path)}"
        return text

    return make(schema, "$", "")
