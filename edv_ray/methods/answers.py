"""Strict JSON answers from models (pure: no client, no Ray).

A *caller* is ``(messages, json_schema) -> str`` (the model's raw text); jobs bind it to
the one LLM client. Malformed output is retried, then rejected — never returned as valid.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

Caller = Callable[[list[dict[str, Any]], dict[str, Any]], str]

_LENGTH_KEYS = {"minLength", "maxLength", "minItems", "maxItems", "pattern"}


def decoding_schema(model) -> dict[str, Any]:
    """The JSON schema sent for constrained decoding: the model's shape without length
    limits (llama.cpp expands each bounded string into a grammar rule per character and
    gives up — measured: the server process crashed). Lengths are still enforced by the
    strict pydantic validation of the answer. A fresh copy each call (built once per
    model: pydantic's schema generation was a tenth of a verify job's CPU)."""
    return json.loads(_decoding_schema_json(model))


@functools.cache
def _decoding_schema_json(model) -> str:
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in _LENGTH_KEYS}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return json.dumps(strip(model.model_json_schema()))


def parse_json(raw: str) -> Any:
    raw = (raw or "").strip()
    if raw.startswith("```"):
        raw = raw.strip("`").removeprefix("json").strip()
    return json.loads(raw)


def ask_json(call: Caller, prompt: str, model: type[BaseModel], retries: int,
             check: Callable[[Any], None] | None = None) -> tuple[Any | None, int, str | None]:
    """Ask for a strict JSON answer, retried; (answer or None, attempts, last error).
    Malformed output is never returned as valid."""
    schema, error = decoding_schema(model), None
    for attempt in range(1, retries + 2):
        raw = call([{"role": "user", "content": prompt}], schema)
        try:
            answer = model.model_validate(parse_json(raw))
            if check is not None:
                check(answer)
            return answer, attempt, None
        except (ValueError, ValidationError) as err:
            error = f"{type(err).__name__}: {str(err)[:300]} | raw: {(raw or '')[:200]}"
    return None, retries + 1, error
