"""Stage 2 of MMTB scoring: the arguments of a mission's calls (``analysis_result.py``).

Only for missions that passed stage 1. Every predicted call is paired greedily, in
prediction order, with the best-scoring unpaired gold call of the same name (ties: the
first); the mission passes when every pair scores >= 0.7. The calls' names must match
the gold ones as multisets (``prepare_to_answer`` / ``ask_user_for_required_parameters``
excluded from the gold side only: a model that called them as tools fails here).

A call scores 0 when a required parameter is missing; {} against {} scores 1; else the
mean over the predicted arguments: unknown to the schema 0; absent from the gold call 1
if ``str(value).lower()`` is in the parameter's description (or is "none" and the
description says "null"), else 0; otherwise the value score. A value: ints compared as
floats; different types 0; equal, or equal strings ignoring case or all whitespace, 1;
objects: the mean over the predicted keys against the schema's ``items`` or
``properties`` (a key unknown there makes the whole object 0); then by the schema's
``type``: numbers and booleans 0, strings 1 for two "lat,lng" pairs else ROUGE-L F over
jieba tokens (spaces are tokens), arrays sorted by their JSON text (ASCII-escaped) and
compared element-wise (different lengths 0).

The official code raises on some inputs (a value its schema type cannot score, an empty
call paired with a non-empty gold call, a schema without ``parameters`` / ``properties``,
a gold tool missing from the tool list), and its name-count asserts fail where the calls'
names differ from the gold ones; the mission is then wrong and its stage-1 label is
turned to "error" too (:func:`check_arguments_raising` says when). ``strict=False``
(``metrics: corrected``) scores such a value or pair 0 and goes on.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from edv_ray.envs.mmtb.data import SPECIAL, GoldNode

THRESHOLD = 0.7
_LATLNG = re.compile(r"^\d+\.\d+,\d+\.\d+$")
_NUMERIC = ("integer", "boolean", "float", "number")


class Unscorable(Exception):
    """The official check raises here (the mission fails in official mode)."""


def tokens(text: str) -> list[str]:
    """jieba's default (accurate, HMM) cut, spaces kept as tokens, as the official
    ROUGE tokenizer does."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    return jieba.lcut(text)


def rouge_l_f(pred: str, gold: str) -> float:
    """ROUGE-L F-measure over jieba tokens (as rouge-score computes it)."""
    a, b = tokens(pred), tokens(gold)
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    lcs = prev[-1]
    precision, recall = lcs / len(b), lcs / len(a)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _described(value: Any, schema: Any) -> float:
    if not isinstance(schema, dict):
        raise Unscorable("parameter schema is not an object")
    desc = schema.get("description", "")
    if not isinstance(desc, str):
        raise Unscorable("description is not a string")
    text = str(value).lower()
    return 1.0 if text in desc.lower() or (text == "none" and "null" in desc.lower()) else 0.0


def _object(pred: dict, gold: dict, schema: Any, strict: bool) -> float:
    if not isinstance(schema, dict):
        raise Unscorable("object schema is not an object")
    keys = schema["items"] if "items" in schema else schema.get("properties", schema)
    if not isinstance(keys, dict):
        raise Unscorable("object keys schema is not an object")
    if "properties" in keys:
        keys = keys["properties"]
        if not isinstance(keys, dict):
            raise Unscorable("properties is not an object")
    scores = []
    for key, value in pred.items():
        if key not in keys:
            return 0.0
        scores.append(score_value(value, gold[key], keys[key], strict) if key in gold
                      else _guarded(_described, strict, value, keys[key]))
    if not scores:
        return 1.0 if not gold else 0.0
    return sum(scores) / len(scores)


def _array(pred: Any, gold: Any, schema: dict, strict: bool) -> float:
    if not isinstance(pred, list):
        raise Unscorable("array schema for a non-list value")
    ps = sorted(pred, key=lambda x: json.dumps(x, sort_keys=True))
    gs = sorted(gold, key=lambda x: json.dumps(x, sort_keys=True))
    if len(ps) != len(gs):
        return 0.0
    item = schema.get("items", {"type": "string"})
    if isinstance(item, dict):
        item = item.get("properties", item) if "properties" in item else item
    elif not isinstance(item, (str, list)) or "properties" in item:
        raise Unscorable("items schema cannot be read")
    return sum(score_value(a, b, item, strict) for a, b in zip(ps, gs)) / len(ps)


def _value(pred: Any, gold: Any, schema: Any, strict: bool) -> float:
    p = float(pred) if type(pred) is int else pred
    g = float(gold) if type(gold) is int else gold
    if type(p) is not type(g):
        return 0.0
    if p == g:
        return 1.0
    if isinstance(p, str) and (p.lower() == g.lower()
                               or "".join(p.split()).lower() == "".join(g.split()).lower()):
        return 1.0
    if isinstance(p, dict):
        return _object(p, g, schema, strict)
    if not isinstance(schema, dict) or "type" not in schema:
        raise Unscorable("schema has no type")
    kind = schema["type"]
    if kind in _NUMERIC:
        return 0.0
    if kind == "string":
        if not isinstance(p, str):
            raise Unscorable("string schema for a non-string value")
        return 1.0 if _LATLNG.match(p) and _LATLNG.match(g) else rouge_l_f(p, g)
    if kind == "array":
        return _array(p, g, schema, strict)
    raise Unscorable(f"schema type {kind!r} cannot be scored")


def _guarded(fn, strict: bool, *args) -> float:
    if strict:
        return fn(*args)
    try:
        return fn(*args)
    except Unscorable:
        return 0.0


def score_value(pred: Any, gold: Any, schema: Any, strict: bool = True) -> float:
    """One argument value against the gold value, in [0, 1]."""
    return _guarded(_value, strict, pred, gold, schema, strict)


def score_call(pred_args: dict[str, Any], gold_args: dict[str, Any], tool: dict[str, Any] | None,
               strict: bool = True) -> float:
    """A predicted call against a gold call of the same tool (``tool`` = its schema
    entry, None when the tool list lacks it)."""
    fn = (tool or {}).get("function", tool) or {}
    params = fn.get("parameters")
    if not isinstance(params, dict):
        if strict:
            raise Unscorable("tool has no parameters schema")
        params = {}
    if any(r not in pred_args for r in params.get("required", [])):
        return 0.0
    if not pred_args and not gold_args:
        return 1.0
    props = params.get("properties")
    if not isinstance(props, dict):
        if strict:
            raise Unscorable("tool has no properties")
        props = {}
    scores = []
    for key, value in pred_args.items():
        if key not in props:
            scores.append(0.0)
        elif key in gold_args:
            scores.append(score_value(value, gold_args[key], props[key], strict))
        else:
            scores.append(_guarded(_described, strict, value, props[key]))
    if not scores:
        if strict:
            raise Unscorable("an empty call against a non-empty gold call (division by zero)")
        return 0.0
    return sum(scores) / len(scores)


def _tool_map(tools: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t.get("function", t).get("name"): t for t in tools}


def check_arguments(pred_calls: Sequence[dict[str, Any]], gold: Sequence[GoldNode],
                    tools: Sequence[dict[str, Any]], strict: bool = True
                    ) -> tuple[bool, list[float]]:
    """Stage 2. ``pred_calls`` = every ``{"name", "arguments"}`` the model made in the
    mission, in order. Returns (passed, the paired scores by name then prediction order)."""
    passed, scores, _raised = check_arguments_raising(pred_calls, gold, tools, strict)
    return passed, scores


def check_arguments_raising(pred_calls: Sequence[dict[str, Any]], gold: Sequence[GoldNode],
                            tools: Sequence[dict[str, Any]], strict: bool = True
                            ) -> tuple[bool, list[float], bool]:
    """:func:`check_arguments` and whether the official check raises here (``strict``
    only): names that differ from the gold ones as multisets (its count asserts: e.g. a
    clarification made through the ask tool), an empty call against a non-empty gold call
    (division by zero), a value or schema it cannot score. The official analysis then
    relabels the mission's stage 1 "error" as well."""
    golds: dict[str, list[GoldNode]] = {}
    for node in gold:
        if node.name not in SPECIAL:
            golds.setdefault(node.name, []).append(node)
    preds: dict[str, list[dict[str, Any]]] = {}
    for call in pred_calls:
        preds.setdefault(call["name"], []).append(call)
    if sorted((k, len(v)) for k, v in preds.items()) != sorted((k, len(v)) for k, v in golds.items()):
        return False, [], strict
    by_name = _tool_map(tools)
    scores: list[float] = []
    try:
        for name, calls in preds.items():
            if name not in by_name and strict:
                raise Unscorable(f"tool {name!r} is not in the tool list")
            used: set[int] = set()
            for call in calls:
                best, best_i = -1.0, -1
                for i, node in enumerate(golds[name]):
                    if i in used:
                        continue
                    s = score_call(call.get("arguments") or {}, node.arguments, by_name.get(name),
                                   strict)
                    if s > best:
                        best, best_i = s, i
                used.add(best_i)
                scores.append(best)
    except Unscorable:
        return False, scores, True
    return all(s >= THRESHOLD for s in scores), scores, False
