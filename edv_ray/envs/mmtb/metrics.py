"""MMTB scoring: the call-graph judge (stage 1), argument checks (stage 2), breakdown.

Stage 1 walks the gold DAG built from ``dependency_list``. At each model turn the
calls' names (as a multiset: parallel calls in any order) must equal the names of a
set of *ready* gold nodes (all dependencies done); calls sharing a name are taken
either all together or one at a time, as the benchmark's path enumeration allows.
A text turn is accepted where a clarification node (``ask_user_for_required_parameters``)
is ready (the gold ``user_input`` then follows) or where ``prepare_to_answer`` is
ready (the mission ends). Anything else fails the mission. ``is_optimal`` = done in
the fewest possible turns (the longest dependency chain).

Stage 2 (only for missions correct in stage 1): every predicted call is paired
greedily with the best-scoring unpaired gold call of the same name; the mission
fails when per-name counts differ or any pair scores < 0.7 (scoring rules in
:func:`score_call`). ROUGE-L uses a built-in tokenizer (CJK characters, words,
punctuation) instead of jieba; an empty prediction against non-empty gold
arguments scores 0 (the reference code divides by zero there).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from edv_ray.envs.mmtb.data import ASK, PREPARE, SPECIAL, GoldNode

THRESHOLD = 0.7
_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W_]+|[^\w\s]|_", re.UNICODE)
_LATLNG = re.compile(r"^\d+\.\d+,\d+\.\d+$")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def rouge_l_f(pred: str, gold: str) -> float:
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
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def _props(schema: dict[str, Any]) -> dict[str, Any]:
    """The property map that describes an object value's keys."""
    if "properties" in schema and isinstance(schema["properties"], dict):
        return schema["properties"]
    items = schema.get("items")
    if isinstance(items, dict):
        return _props(items)
    return schema


def _desc_match(value: Any, schema: dict[str, Any]) -> float:
    desc = str(schema.get("description", "")).lower() if isinstance(schema, dict) else ""
    text = str(value).lower()
    if text in desc or (text == "none" and "null" in desc):
        return 1.0
    return 0.0


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def score_value(pred: Any, gold: Any, schema: dict[str, Any] | None) -> float:
    """One argument value against the gold value, in [0, 1]."""
    schema = schema if isinstance(schema, dict) else {}
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
        props = _props(schema)
        scores = []
        for key, val in p.items():
            if key not in props:
                return 0.0  # hallucinated key
            sub = props[key] if isinstance(props[key], dict) else {}
            scores.append(score_value(val, g[key], sub) if key in g else _desc_match(val, sub))
        if not scores:
            return 1.0 if not g else 0.0
        return sum(scores) / len(scores)
    if isinstance(p, list):
        if len(p) != len(g):
            return 0.0
        if not p:
            return 1.0
        item = schema.get("items", {"type": "string"})
        item = item if isinstance(item, dict) else {}
        pairs = zip(sorted(p, key=_canonical), sorted(g, key=_canonical), strict=True)
        return sum(score_value(a, b, item) for a, b in pairs) / len(p)
    if isinstance(p, str):
        if _LATLNG.match(p) and _LATLNG.match(g):
            return 1.0
        return rouge_l_f(p, g)
    return 0.0  # numbers and booleans that differ


def tool_schema(tools: Iterable[dict[str, Any]], name: str) -> dict[str, Any]:
    for t in tools:
        fn = t.get("function", t)
        if fn.get("name") == name:
            return fn.get("parameters") or {}
    return {}


def score_call(pred_args: dict[str, Any], gold_args: dict[str, Any],
               parameters: dict[str, Any]) -> float:
    """A predicted call against a gold call of the same tool: 0 if a required parameter
    is missing; else the mean over predicted arguments (unknown to the schema → 0;
    absent from gold → 1 if the value appears in the parameter's description)."""
    if any(r not in pred_args for r in parameters.get("required", []) or []):
        return 0.0
    if not pred_args:
        return 1.0 if not gold_args else 0.0
    props = parameters.get("properties") or {}
    scores = []
    for key, val in pred_args.items():
        if key not in props:
            scores.append(0.0)
        elif key in gold_args:
            scores.append(score_value(val, gold_args[key], props[key]))
        else:
            scores.append(_desc_match(val, props[key]))
    return sum(scores) / len(scores)


def check_arguments(pred_calls: Sequence[dict[str, Any]], gold: Sequence[GoldNode],
                    tools: Sequence[dict[str, Any]]) -> tuple[bool, list[float]]:
    """Stage 2. ``pred_calls`` = every ``{"name", "arguments"}`` the model made in the
    mission. Returns (passed, the paired scores in prediction order)."""
    preds = [c for c in pred_calls if c["name"] not in SPECIAL]
    golds = [n for n in gold if n.name not in SPECIAL]
    if Counter(c["name"] for c in preds) != Counter(n.name for n in golds):
        return False, []
    scores: list[float] = []
    used: set[int] = set()
    for call in preds:
        params = tool_schema(tools, call["name"])
        best, best_i = -1.0, -1
        for i, node in enumerate(golds):
            if i in used or node.name != call["name"]:
                continue
            s = score_call(call.get("arguments") or {}, node.arguments, params)
            if s > best:
                best, best_i = s, i
        used.add(best_i)
        scores.append(best)
    return all(s >= THRESHOLD for s in scores), scores


class MissionJudge:
    """Stage 1 over one mission's gold nodes; feed it the model's turns in order."""

    def __init__(self, nodes: Sequence[GoldNode], tools: Sequence[dict[str, Any]] = ()):
        self.nodes = {n.idx: n for n in nodes}
        self.tools = list(tools)
        self.done: set[int] = set()
        self.turns = 0

    def ready(self) -> list[GoldNode]:
        return [n for i, n in sorted(self.nodes.items())
                if i not in self.done and all(d in self.done for d in n.dependency_list)]

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.nodes)

    def min_turns(self) -> int:
        depth: dict[int, int] = {}

        def d(i: int, seen: frozenset = frozenset()) -> int:
            if i not in depth:
                deps = [x for x in self.nodes[i].dependency_list if x in self.nodes and x not in seen]
                depth[i] = 1 + max((d(x, seen | {i}) for x in deps), default=0)
            return depth[i]

        return max((d(i) for i in self.nodes), default=0)

    def accept_calls(self, calls: Sequence[dict[str, Any]]) -> list[GoldNode] | None:
        """The gold nodes these calls perform (in the calls' order), or None if no
        valid path allows them now."""
        ready = self.ready()
        chosen: list[GoldNode | None] = [None] * len(calls)
        for name, count in Counter(c["name"] for c in calls).items():
            group = [n for n in ready if n.name == name]
            if count > len(group) or (count != 1 and count != len(group)):
                return None
            idxs = [i for i, c in enumerate(calls) if c["name"] == name]
            params = tool_schema(self.tools, name)
            free = list(group)
            for i in idxs:  # pair each call with its best-matching gold node
                node = max(free, key=lambda n: (score_call(calls[i].get("arguments") or {},
                                                           n.arguments, params), -n.idx))
                free.remove(node)
                chosen[i] = node
        self.turns += 1
        self.done.update(n.idx for n in chosen if n is not None)
        return [n for n in chosen if n is not None]

    def accept_text(self) -> GoldNode | None:
        """A text turn: the clarification node it performs (a ready
        ``ask_user_for_required_parameters``; its ``user_input`` is the user's reply),
        the ready ``prepare_to_answer`` node (the mission is over), or None (a call
        was due: the mission fails)."""
        ready = self.ready()
        node = (next((n for n in ready if n.name == ASK), None)
                or next((n for n in ready if n.name == PREPARE), None))
        if node is not None:
            self.done.add(node.idx)
            self.turns += 1
        return node


def answer_structure(nodes: Sequence[GoldNode]) -> str | None:
    """How the gold calls are arranged: "parallel" (independent calls batched),
    "serial" (a chain), "serial_parallel" (both) or None (one call, or none). Calls are
    grouped in list order; a call depending on one of the current group opens a new one."""
    groups: list[list[int]] = []
    for n in nodes:
        if n.name in SPECIAL:
            continue
        if groups and not any(d in groups[-1] for d in n.dependency_list):
            groups[-1].append(n.idx)
        else:
            groups.append([n.idx])
    serial, parallel = len(groups) > 1, any(len(g) > 1 for g in groups)
    if serial and parallel:
        return "serial_parallel"
    return "serial" if serial else "parallel" if parallel else None


@dataclass(frozen=True)
class MissionResult:
    kind: str  # single | multi | chat | clarify | unknown
    structure: str | None  # answer_structure of the gold nodes
    correct: bool
    optimal: bool = False


BREAKDOWN_KEYS = ("overall", "single", "multi", "chat", "clarify", "serial_multi",
                  "parallel_multi", "serial_parallel_multi")


def breakdown(results: Sequence[MissionResult]) -> dict[str, float | None]:
    """Micro accuracy per mission group (None when a group is empty), counts ``n_*``
    and the optimal-path rate of correct multi-tool missions."""
    groups: dict[str, list[MissionResult]] = {k: [] for k in BREAKDOWN_KEYS}
    for r in results:
        groups["overall"].append(r)
        if r.kind in groups:
            groups[r.kind].append(r)
        if r.kind == "multi" and r.structure:
            groups[f"{r.structure}_multi"].append(r)
    out: dict[str, float | None] = {}
    for k, rs in groups.items():
        out[k] = sum(r.correct for r in rs) / len(rs) if rs else None
        out[f"n_{k}"] = float(len(rs))
    ok_multi = [r for r in groups["multi"] if r.correct]
    out["optimal_rate_multi"] = (sum(r.optimal for r in ok_multi) / len(ok_multi)
                                 if ok_multi else None)
    return out
