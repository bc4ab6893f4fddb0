"""Distill, Verify and routing: pure functions over plain records.

A *caller* is ``(messages, json_schema) -> str`` (the model's raw text); the runtime
binds it to the one LLM client. Malformed output is retried, then rejected: Distill
yields no candidates (never half-parsed ones), an unparseable vote is a reject.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import ValidationError

from edv_ray.edv.records import (
    DistillAnswer,
    DistilledExperience,
    TrajectoryView,
    VoteAnswer,
)
from edv_ray.prompts import render_prompt

Caller = Callable[[list[dict[str, Any]], dict[str, Any]], str]


def render_transcript(messages: list[dict[str, Any]], max_chars: int) -> str:
    """A compact, readable transcript of a τ²-bench message list (JSON dicts)."""
    lines = []
    for m in messages:
        role = m.get("role")
        if m.get("tool_calls"):
            for tc in m["tool_calls"]:
                lines.append(f"{role} calls {tc.get('name')}({json.dumps(tc.get('arguments'))})")
        elif role == "tool":
            lines.append(f"tool result: {(m.get('content') or '')[:300]}")
        elif m.get("content"):
            lines.append(f"{role}: {m['content'][:600]}")
    text = "\n".join(lines)
    if len(text) > max_chars:  # keep the start (setup) and the end (outcome)
        half = max_chars // 2
        text = text[:half] + "\n[...]\n" + text[-half:]
    return text


_LENGTH_KEYS = {"minLength", "maxLength", "minItems", "maxItems", "pattern"}


def decoding_schema(model) -> dict[str, Any]:
    """The JSON schema sent for constrained decoding: the model's shape without length
    limits (llama.cpp expands each bounded string into a grammar rule per character and
    gives up — measured: the server process crashed). Lengths are still enforced by the
    strict pydantic validation of the answer."""
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in _LENGTH_KEYS}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(model.model_json_schema())


def _parse_json(raw: str) -> Any:
    raw = (raw or "").strip()
    if raw.startswith("```"):
        raw = raw.strip("`").removeprefix("json").strip()
    return json.loads(raw)


@dataclass
class DistillResult:
    status: str  # ok | empty | malformed
    attempts: int
    experiences: list[DistilledExperience]
    error: str | None = None


def distill(task: str, policy: str, trajectories: list[TrajectoryView], call: Caller, *,
            sees_reward: bool, max_candidates: int, retries: int) -> DistillResult:
    """Ask the distiller for lessons that contrast the runs; strict schema, retried."""
    blocks = []
    for t in trajectories:
        outcome = f" (outcome: {'success' if t.success else 'failure'}, reward {t.reward:.2f})" if sees_reward else ""
        blocks.append(f"<run label=\"{t.label}\"{outcome}>\n{t.transcript}\n</run>")
    note = ("Each run's graded outcome is given." if sees_reward
            else "The runs' outcomes are not given: judge them from the policy.")
    prompt = render_prompt("edv", "distill.v1", task=task, policy=policy,
                           trajectories="\n".join(blocks), reward_note=note,
                           max_candidates=max_candidates)
    labels = {t.label for t in trajectories}
    schema = decoding_schema(DistillAnswer)
    error = None
    for attempt in range(1, retries + 2):
        raw = call([{"role": "user", "content": prompt}], schema)
        try:
            answer = DistillAnswer.model_validate(_parse_json(raw))
            bad = [e.evidence for e in answer.experiences if not set(e.evidence) <= labels]
            if bad:
                raise ValueError(f"evidence cites unknown runs {bad}; known {sorted(labels)}")
        except (ValueError, ValidationError) as err:
            error = f"{type(err).__name__}: {str(err)[:300]}"
            continue
        exps = answer.experiences[:max_candidates]
        return DistillResult("ok" if exps else "empty", attempt, exps)
    return DistillResult("malformed", retries + 1, [], error)


def supporting_ids(exp_evidence: list[str], trajectories: list[TrajectoryView]) -> tuple[list[str], list[str]]:
    """(supporting, rejected) episode ids: cited runs support a lesson; with no
    citation every run does. The others are recorded as rejected."""
    cited = set(exp_evidence) or {t.label for t in trajectories}
    sup = [t.episode_id for t in trajectories if t.label in cited]
    rej = [t.episode_id for t in trajectories if t.label not in cited]
    return sup, rej


@dataclass
class VoteResult:
    approve: bool
    parse_ok: bool
    rationale: str


def vote(task: str, policy: str, context: str, title: str, when_to_use: str, rule: str,
         call: Caller, *, retries: int) -> VoteResult:
    """One verifier's approve/reject on one candidate; unparseable (after retries) = reject."""
    prompt = render_prompt("edv", "verify.v1", task=task, policy=policy, context=context,
                           title=title, when_to_use=when_to_use, rule=rule)
    schema = decoding_schema(VoteAnswer)
    last = ""
    for _ in range(retries + 1):
        raw = call([{"role": "user", "content": prompt}], schema)
        try:
            ans = VoteAnswer.model_validate(_parse_json(raw))
            return VoteResult(ans.approve, True, ans.rationale)
        except (ValueError, ValidationError) as err:
            last = f"unparseable vote ({type(err).__name__}): {(raw or '')[:200]}"
    return VoteResult(False, False, last)


def route(approvals: dict[str, bool]) -> tuple[str, list[str]]:
    """Default-reject routing: all approve → shared; some → private (approvers); none → discard.
    No verifiers (verify_by=none) approves by construction → shared."""
    approvers = sorted(v for v, ok in approvals.items() if ok)
    if len(approvers) == len(approvals):
        return "shared", approvers
    if approvers:
        return "private", approvers
    return "discard", []
