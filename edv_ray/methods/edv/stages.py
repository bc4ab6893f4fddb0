"""Distill, Verify and admission to a bank: pure functions over plain records.

A *caller* is ``(messages, json_schema) -> str`` (the model's raw text); the runtime
binds it to the one LLM client. Malformed output is retried, then rejected: Distill
yields no candidates (never half-parsed ones), an unparseable vote is a reject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pydantic import ValidationError

from edv_ray.memory.records import lesson_bounds_text
from edv_ray.methods.edv.records import (
    MAX_TAGS,
    DistillAnswer,
    DistilledExperience,
    TrajectoryView,
    VoteAnswer,
)
from edv_ray.methods.answers import Caller, decoding_schema
from edv_ray.methods.answers import parse_json as _parse_json
from edv_ray.prompts import fence, render_prompt


def _identity_fit(render: Callable[[list[str]], str], parts: list[str]) -> str:
    return render(parts)


@dataclass
class DistillResult:
    status: str  # ok | empty | malformed
    attempts: int
    experiences: list[DistilledExperience]
    error: str | None = None
    shown_outcomes: bool = False  # the prompt sent showed the runs' grades (measured)


_OUTCOME_SHOWN = re.compile(r'<run [^>]*outcome="')


def outcomes_shown(prompt: str) -> bool:
    """Whether a stage prompt shows any run's grade (only our code writes <run> tags:
    transcripts inside are fenced, so they cannot forge one)."""
    return bool(_OUTCOME_SHOWN.search(prompt))


def run_block(t: TrajectoryView, transcript: str, sees_reward: bool) -> str:
    outcome = (f' outcome="{"success" if t.success else "failure"}" reward="{t.reward:.2f}"'
               if sees_reward else "")
    return f'<run label="{t.label}" agent="{t.agent}"{outcome}>\n{fence(transcript)}\n</run>'


def distill_prompt(n_runs: int, sees_reward: bool) -> str:
    """The distill prompt for ``n_runs`` runs: several runs are compared, a single run is
    examined on its own (there is nothing to compare it with)."""
    kind = "graded" if sees_reward else "blind"
    return f"distill_single_{kind}.v2" if n_runs == 1 else f"distill_{kind}.v4"


def distill(task: str, policy: str, trajectories: list[TrajectoryView], call: Caller, *,
            sees_reward: bool, max_candidates: int, retries: int, task_noun: str = "task",
            fit: Callable = _identity_fit) -> DistillResult:
    """Ask the distiller for lessons that contrast the runs — or, given one run (one
    executor, ``distill_by: self``), lessons from that run alone; strict schema, retried.
    ``fit(render, transcripts)`` shortens transcripts to the model's prompt budget."""
    name = distill_prompt(len(trajectories), sees_reward)

    def render(transcripts: list[str]) -> str:
        blocks = "\n".join(run_block(t, tx, sees_reward) for t, tx in zip(trajectories, transcripts))
        return render_prompt("methods/edv", name, task=fence(task), policy=policy,
                             trajectories=blocks, task_noun=task_noun,
                             max_candidates=max_candidates, lesson_bounds=lesson_bounds_text(),
                             max_tags=MAX_TAGS)

    prompt = fit(render, [t.transcript for t in trajectories])
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
        return DistillResult("ok" if exps else "empty", attempt, exps,
                             shown_outcomes=outcomes_shown(prompt))
    return DistillResult("malformed", retries + 1, [], error, shown_outcomes=outcomes_shown(prompt))


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
    shown_outcomes: bool = False  # the prompt sent showed the runs' grades (measured)


def vote(task: str, policy: str, context: list[TrajectoryView], title: str, when_to_use: str,
         rule: str, call: Caller, *, retries: int, sees_reward: bool,
         fit: Callable = _identity_fit) -> VoteResult:
    """One verifier's approve/reject on one candidate; unparseable (after retries) = reject.
    ``context`` = the runs the verifier judges from (its own run, as an executor)."""
    def render(transcripts: list[str]) -> str:
        runs = "\n".join(run_block(t, tx, sees_reward) for t, tx in zip(context, transcripts))
        return render_prompt("methods/edv", "verify.v2", task=fence(task), policy=policy,
                             context=runs or "(no run of yours is available)",
                             title=fence(title), when_to_use=fence(when_to_use), rule=fence(rule))

    prompt = fit(render, [t.transcript for t in context])
    schema = decoding_schema(VoteAnswer)
    last = ""
    for _ in range(retries + 1):
        raw = call([{"role": "user", "content": prompt}], schema)
        try:
            ans = VoteAnswer.model_validate(_parse_json(raw))
            return VoteResult(ans.approve, True, ans.rationale, outcomes_shown(prompt))
        except (ValueError, ValidationError) as err:
            last = f"unparseable vote ({type(err).__name__}): {(raw or '')[:200]}"
    return VoteResult(False, False, last, outcomes_shown(prompt))


def admit(approvals: dict[str, bool]) -> tuple[str, list[str]]:
    """Default-reject admission of one candidate, from its votes: (destination, approvers).
    All approve → the shared bank; some → the approvers' private banks; none — or no vote
    at all — → discard. (verify_by=none records an explicit approving vote.)"""
    approvers = sorted(v for v, ok in approvals.items() if ok)
    if not approvals:
        return "discard", []
    if len(approvers) == len(approvals):
        return "shared", approvers
    if approvers:
        return "private", approvers
    return "discard", []
