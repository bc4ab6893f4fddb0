"""Play one Mind2Web task offline with the MindAct multi-choice protocol.

Per step: keep the candidates ranked < top_k (positives + negatives), shuffle them
with a RNG seeded by (seed, task, step), then play rounds while more than one
remains: take the next five, list them as B, C, … in page order plus
"A. None of the above"; a chosen element goes to the back of the pool and its
answer becomes the step's current prediction (a letter past the round's options
picks nothing). The prediction counts only if the pool ends non-empty. Each round is one independent model call ``[system, user]``:
the model sees the task, the gold previous actions ``action_reprs[:step]`` (the last
``previous_k``, MindAct's default 5) and the options. Steps with no positive inside
top-k or a single candidate are scored 0 without a call, as the official code does.

Judging roles never see gold actions: each stored round also carries
``review_content``, the same prompt listing the agent's OWN previous actions, and
:func:`render_trajectory` shows that one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from edv_ray.envs.mind2web.data import Step, Task
from edv_ray.envs.mind2web.dom import dom_order, index_elements, render_element
from edv_ray.envs.mind2web.metrics import (
    Mode,
    StepScore,
    TaskScore,
    action_string,
    gold_action,
    parse_answer,
    score_step,
)
from edv_ray.prompts import experiences_block, render_prompt
from edv_ray.prompts.budget import keep_end

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
    own_action: str = ""  # the agent's own action as judging roles see it


@dataclass
class EpisodeOutcome:
    task_id: str
    success: bool
    reward: float  # step success rate of the task
    metrics: dict[str, float]
    steps: list[StepRecord]
    messages: list[dict[str, Any]] = field(default_factory=list)
    metrics_mode: str = "official"  # Mind2WebBenchmark.metrics: official | corrected

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def top_k_candidates(step: Step, top_k: int) -> tuple[list[str], list[str]]:
    """(positive ids, negative ids) whose rank is < top_k; unranked ones are dropped."""
    def keep(cands):
        return [c.backend_node_id for c in cands if c.rank is not None and c.rank < top_k]
    return keep(step.pos_candidates), keep(step.neg_candidates)


AGENT_HEADING = "Previous actions:"
REVIEW_HEADING = "Previous actions (the agent's own choices, not checked):"
NO_CHOICE = "(no element chosen)"


@dataclass
class _Play:
    """One episode's settings and running state."""
    task: Task
    complete: Complete
    system: str
    seed: int
    top_k: int
    previous_k: int
    mode: Mode
    messages: list[dict[str, Any]]
    own: list[str] = field(default_factory=list)  # the agent's own actions so far

    def prompt(self, index: int, options: list[str], review: bool) -> str:
        prev = self.own[:index] if review else list(self.task.action_reprs[:index])
        prev = prev[-self.previous_k:] if self.previous_k > 0 else []
        return render_prompt(PROMPTS, "round.v1", website=self.task.website,
                             task=self.task.confirmed_task,
                             previous_heading=REVIEW_HEADING if review else AGENT_HEADING,
                             previous_actions="\n".join(prev) if prev else "None",
                             options="\n".join(["A. None of the above"] + options))


def _own_action(rendering: str, op: str, value: str) -> str:
    return f"{rendering} -> {op or '(no operation)'}" + (f": {value}" if value else "")


def _play_step(play: _Play, index: int) -> StepRecord:
    task, step = play.task, play.task.steps[index]
    pos, neg = top_k_candidates(step, play.top_k)
    pool = pos + neg
    random.Random(f"{play.seed}/{task.annotation_id}/{step.action_uid}").shuffle(pool)
    n = len(pool)
    final: tuple[str, str, str, str] | None = None  # id, op, value, rendering
    rounds = 0
    if pos and n > 1:
        elements = index_elements(step.cleaned_html)
        by_id = {c.backend_node_id: c for c in step.pos_candidates + step.neg_candidates}
        while len(pool) > 1:
            batch, pool = pool[:ROUND_SIZE], pool[ROUND_SIZE:]
            ordered = dom_order(batch, elements)
            shown = [render_element(elements.get(c), by_id[c]) for c in ordered]
            options = [f"{LETTERS[i]}. {r}" for i, r in enumerate(shown)]
            content = play.prompt(index, options, review=False)
            reply = play.complete([{"role": "system", "content": play.system},
                                   {"role": "user", "content": content}])
            rounds += 1
            play.messages += [{"role": "user", "content": content,
                               "review_content": play.prompt(index, options, review=True)},
                              {"role": "assistant", "content": reply or ""}]
            letter, op, value = parse_answer(reply)
            if letter != "A":
                pick = LETTERS.find(letter)
                final = None  # as the official LLM path (moot: such a round is the last)
                if pick < len(ordered):
                    pool.append(ordered[pick])
                    final = (ordered[pick], op, value, shown[pick])
    if not pool:
        final = None
    chosen, op, value, shown_pick = final if final else (None, "", "", "")
    predicted = action_string(op, value) if final else ""
    gold = gold_action(step.op, step.value, play.mode)
    score = score_step(pos, n, chosen, predicted if final else None, gold)
    play.own.append(_own_action(shown_pick, op, value) if final else NO_CHOICE)
    return StepRecord(
        index=index, action_uid=step.action_uid, gold_action=gold,
        positive_ids=pos, n_candidates=n, rounds=rounds, chosen_id=chosen,
        predicted_op=op, predicted_value=value, predicted_action=predicted,
        element_correct=score.element_correct, action_f1=score.action_f1,
        step_success=score.step_success, reason=score.reason, own_action=play.own[-1],
    )


def run_episode(task: Task, complete: Complete, experiences: Sequence[str] = (),
                seed: int = 0, top_k: int = 50, previous_k: int = 5,
                metrics: Mode = "official") -> EpisodeOutcome:
    """Play every step of ``task``; ``complete(messages) -> str`` is the model;
    ``metrics``: official | corrected (see the package README)."""
    system = system_prompt(experiences)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    play = _Play(task, complete, system, seed, top_k, previous_k, metrics, messages)
    records = [_play_step(play, i) for i in range(len(task.steps))]
    score = _task_score(task.annotation_id, records)
    return EpisodeOutcome(task_id=task.annotation_id, success=score.success,
                          reward=score.step_sr, metrics=score.as_dict(), steps=records,
                          messages=messages, metrics_mode=metrics)


def _task_score(task_id: str, records: Sequence[StepRecord]) -> TaskScore:
    return TaskScore(task_id,
                     tuple(StepScore(r.element_correct, r.action_f1, r.step_success, r.reason)
                           for r in records),
                     upper_bound_ok=all(r.positive_ids for r in records))


def task_score(outcome: EpisodeOutcome) -> TaskScore:
    """The metric object of an outcome (feed a list of them to ``metrics.aggregate``)."""
    return _task_score(outcome.task_id, outcome.steps)


def task_score_of(detail: dict[str, Any]) -> TaskScore:
    """The metric object of a stored outcome (an episode's ``reward_json``)."""
    steps = [StepRecord(**s) for s in detail.get("steps") or []]
    return _task_score(str(detail.get("task_id", "")), steps)


_GOLD_PREVIOUS = re.compile(rf"{re.escape(AGENT_HEADING)}\n.*?\n\n(?=Which element)", re.DOTALL)


def _review_text(m: dict[str, Any]) -> str:
    """A round as judging roles see it: the agent's own previous actions, never the gold
    ones (a transcript stored without ``review_content`` shows none)."""
    if m.get("role") != "user":
        return str(m.get("content") or "")
    if "review_content" in m:
        return str(m["review_content"] or "")
    return _GOLD_PREVIOUS.sub(f"{AGENT_HEADING} (not shown)\n\n", str(m.get("content") or ""))


def render_trajectory(messages: Sequence[dict[str, Any]], max_chars: int = 4000) -> str:
    """The transcript for distillers, verifiers and judges: the system prompt is left
    out, each round shows the agent's own previous actions (never the gold ones), turns
    are whole; past ``max_chars`` the start is cut, keeping the latest steps (the cut
    marked on a line of its own: :func:`edv_ray.prompts.budget.keep_end`)."""
    lines = [f"[{m.get('role', '?')}] {_review_text(m).strip()}"
             for m in messages if m.get("role") != "system"]
    return keep_end("\n".join(lines), max_chars)[0]
