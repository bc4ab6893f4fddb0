"""Play one Mind2Web task offline with the MindAct multi-choice protocol.

Per step: keep the candidates ranked < top_k (positives + negatives), shuffle them
with a RNG seeded by (seed, task, step), then play rounds while more than one
remains: take the next five, list them as B, C, … in page order plus
"A. None of the above"; a chosen element goes to the back of the pool and its
answer becomes the step's current prediction. The prediction counts only if the
pool ends non-empty (as in the reference evaluator). Each round is one independent
model call ``[system, user]``: the model sees the task, the gold previous actions
``action_reprs[:step]`` (the last ``previous_k``, MindAct's default 5) and the
options. Steps with no positive inside top-k or a single candidate are scored 0
without a call, as the reference code does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from edv_ray.envs.mind2web.data import Step, Task
from edv_ray.envs.mind2web.dom import dom_order, index_elements, render_element
from edv_ray.envs.mind2web.metrics import StepScore, TaskScore, action_string, score_step
from edv_ray.envs.selection import keep_end
from edv_ray.prompts import experiences_block, render_prompt

Complete = Callable[[list[dict[str, Any]]], str]
PROMPTS = "envs/mind2web"  # render_prompt package path: edv_ray/envs/mind2web/prompts/
ROUND_SIZE = 5
LETTERS = "BCDEFGHIJKLMNOPQRSTUVWXYZ"


def observed_text(task: Task) -> str:
    """What the agent is told (and what retrieval is keyed on)."""
    return f"{task.confirmed_task}\nWebsite: {task.website}"


def task_type(task: Task) -> str:
    """The task type for the Ability Matrix: the website's domain (Travel, Shopping, …)."""
    return task.domain


def instructions() -> str:
    """The benchmark's rules in one paragraph (the 'policy' a distiller may read)."""
    return render_prompt(PROMPTS, "instructions.v1")


def system_prompt(experiences: Sequence[str] = ()) -> str:
    block = experiences_block(PROMPTS, experiences)  # stored lessons are fenced data
    return render_prompt(PROMPTS, "system.v1", experiences_block=block)


_ANSWER = re.compile(r"Answer\s*:\s*\(?([A-Z])\b")
_LEADING = re.compile(r"^\s*\(?([A-Z])(?:[.):]|\s*$|\s*\n)")
_ACTION = re.compile(r"Action\s*:\s*(CLICK|SELECT|TYPE)\b", re.IGNORECASE)
_VALUE = re.compile(r"^\s*Value\s*:[ \t]*(.*)$", re.MULTILINE)


def parse_answer(text: str | None) -> tuple[str, str, str]:
    """Model answer → (option letter, op, value). No readable letter means "A"
    (none of the above); a missing Action or Value line gives an empty string."""
    text = text or ""
    m = _ANSWER.search(text) or _LEADING.search(text)
    letter = m.group(1) if m else "A"
    op = _ACTION.search(text)
    value = _VALUE.search(text)
    return letter, op.group(1).upper() if op else "", value.group(1).strip() if value else ""


@dataclass
class StepRecord:
    index: int
    action_uid: str
    gold_action: str
    positive_ids: list[str]  # positives inside top-k
    n_candidates: int  # top-k candidates (positives + negatives)
    rounds: int
    chosen_id: str | None
    predicted_op: str
    predicted_value: str
    predicted_action: str
    element_correct: float
    action_f1: float
    step_success: float
    reason: str = ""


@dataclass
class EpisodeOutcome:
    task_id: str
    success: bool
    reward: float  # step success rate of the task
    metrics: dict[str, float]
    steps: list[StepRecord]
    messages: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def top_k_candidates(step: Step, top_k: int) -> tuple[list[str], list[str]]:
    """(positive ids, negative ids) whose rank is < top_k; unranked ones are dropped."""
    def keep(cands):
        return [c.backend_node_id for c in cands if c.rank is not None and c.rank < top_k]
    return keep(step.pos_candidates), keep(step.neg_candidates)


def _round_prompt(task: Task, index: int, options: list[str], previous_k: int) -> str:
    prev = list(task.action_reprs[:index])[-previous_k:] if previous_k > 0 else []
    opts = "\n".join(["A. None of the above"] + options)
    return render_prompt(PROMPTS, "round.v1", website=task.website, task=task.confirmed_task,
                         previous_actions="\n".join(prev) if prev else "None", options=opts)


def _play_step(task: Task, index: int, complete: Complete, system: str, seed: int,
               top_k: int, previous_k: int, messages: list[dict[str, Any]]) -> StepRecord:
    step = task.steps[index]
    pos, neg = top_k_candidates(step, top_k)
    pool = pos + neg
    random.Random(f"{seed}/{task.annotation_id}/{step.action_uid}").shuffle(pool)
    n = len(pool)
    final: tuple[str, str, str] | None = None
    rounds = 0
    if pos and n > 1:
        elements = index_elements(step.cleaned_html)
        by_id = {c.backend_node_id: c for c in step.pos_candidates + step.neg_candidates}
        while len(pool) > 1:
            batch, pool = pool[:ROUND_SIZE], pool[ROUND_SIZE:]
            ordered = dom_order(batch, elements)
            options = [f"{LETTERS[i]}. {render_element(elements.get(c), by_id[c])}"
                       for i, c in enumerate(ordered)]
            user = {"role": "user", "content": _round_prompt(task, index, options, previous_k)}
            reply = complete([{"role": "system", "content": system}, user])
            rounds += 1
            messages += [user, {"role": "assistant", "content": reply or ""}]
            letter, op, value = parse_answer(reply)
            pick = LETTERS.find(letter)
            if letter != "A" and 0 <= pick < len(ordered):
                pool.append(ordered[pick])
                final = (ordered[pick], op, value)
    if not pool:
        final = None
    chosen, op, value = final if final else (None, "", "")
    predicted = action_string(op, value) if final else ""
    score = score_step(pos, n, chosen, predicted if final else None, step.gold_action)
    return StepRecord(
        index=index, action_uid=step.action_uid, gold_action=step.gold_action,
        positive_ids=pos, n_candidates=n, rounds=rounds, chosen_id=chosen,
        predicted_op=op, predicted_value=value, predicted_action=predicted,
        element_correct=score.element_correct, action_f1=score.action_f1,
        step_success=score.step_success, reason=score.reason,
    )


def run_episode(task: Task, complete: Complete, experiences: Sequence[str] = (),
                seed: int = 0, top_k: int = 50, previous_k: int = 5) -> EpisodeOutcome:
    """Play every step of ``task``; ``complete(messages) -> str`` is the model."""
    system = system_prompt(experiences)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    records = [_play_step(task, i, complete, system, seed, top_k, previous_k, messages)
               for i in range(len(task.steps))]
    score = _task_score(task.annotation_id, records)
    return EpisodeOutcome(task_id=task.annotation_id, success=score.success,
                          reward=score.step_sr, metrics=score.as_dict(), steps=records,
                          messages=messages)


def _task_score(task_id: str, records: Sequence[StepRecord]) -> TaskScore:
    return TaskScore(task_id,
                     tuple(StepScore(r.element_correct, r.action_f1, r.step_success, r.reason)
                           for r in records),
                     upper_bound_ok=all(r.positive_ids for r in records))


def task_score(outcome: EpisodeOutcome) -> TaskScore:
    """The metric object of an outcome (feed a list of them to ``metrics.aggregate``)."""
    return _task_score(outcome.task_id, outcome.steps)


def render_trajectory(messages: Sequence[dict[str, Any]], max_chars: int = 4000) -> str:
    """A short text of the transcript for distillers and judges: the system prompt
    is left out; long turns are cut in the middle; the whole is cut to ``max_chars``
    keeping its end (the latest steps matter most)."""
    lines = []
    for m in messages:
        if m.get("role") == "system":
            continue
        text = str(m.get("content") or "").strip()
        if len(text) > 1200:
            text = text[:800] + " […] " + text[-300:]
        lines.append(f"[{m.get('role', '?')}] {text}")
    return keep_end("\n".join(lines), max_chars)
