"""Mind2Web's offline metrics, equal to the release's scorer (``src/action_prediction/
metric.py``, ``ActionEvaluatorMultiChoice.evaluate_dataset_llm``) on any input in mode
``official``; mode ``corrected`` fixes its bugs (the package README lists each one).
``tests/fixtures/mind2web/official/`` holds the official code's outputs on cases
written for this, and ``tests/envs/test_mind2web_official.py`` reproduces them.

Per step: element accuracy (the final chosen element is a positive inside top-k),
action F1 (F1 over the *sets* of whitespace tokens of the predicted and gold action
strings, case-sensitive), step success (element correct and F1 == 1). A step with no
positive inside top-k, with no final prediction, or with a single top-k candidate (no
round is played) scores 0 on all three. Aggregates over a split, in the split's order:
micro (over steps), macro (mean of per-task means), task SR (share of tasks without a
failed step), Recall Cap @ top-k (share of steps keeping a positive inside top-k), and
edv-ray's own SR upper bound (share of tasks whose every step keeps one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

Mode = Literal["official", "corrected"]
MODES: tuple[str, ...] = ("official", "corrected")
NO_POSITIVE = "no_positive_in_top_k"

# The answer format of the official LLM evaluation, exactly: one space after each key,
# an upper-case letter A-F and operation, a value running to the end of its line.
_ANSWER = re.compile(r"Answer: (A|B|C|D|E|F)")
_ACTION = re.compile(r"Action: (CLICK|SELECT|TYPE)")
_VALUE = re.compile(r"Value: (.*)$", re.MULTILINE)


def parse_answer(text: str | None) -> tuple[str, str, str]:
    """Model answer → (option letter, op, value), as the official scorer reads it: the
    first ``Answer: X`` (else "A", none of the above), the first ``Action: OP`` (else
    ""), the first ``Value: …`` anywhere, to the end of its line (else "")."""
    text = (text or "").strip()
    letter, op, value = _ANSWER.search(text), _ACTION.search(text), _VALUE.search(text)
    return (letter.group(1) if letter else "A", op.group(1) if op else "",
            value.group(1).strip() if value else "")


def action_string(op: str, value: str = "") -> str:
    """``"OP"`` or ``"OP value"`` (what the benchmark compares)."""
    return f"{op.strip()} {value.strip()}".strip()


def gold_action(op: str, value: str, mode: Mode = "official") -> str:
    """The gold action string: ``"CLICK"``, else ``"OP value"``. The official scorer
    reads the gold back from its ``Value: …`` line, so it keeps the value's first line
    only; ``corrected`` keeps every line."""
    if op == "CLICK":
        return "CLICK"
    return action_string(op, value.split("\n", 1)[0] if mode == "official" else value)


def action_f1(pred: str, gold: str) -> float:
    p, g = set(pred.split()), set(gold.split())
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    tp = len(p & g)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(p), tp / len(g)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class StepScore:
    element_correct: float
    action_f1: float
    step_success: float
    reason: str = ""  # why a step scored 0 without judging: see score_step

    @property
    def has_positive(self) -> bool:
        return self.reason != NO_POSITIVE


def score_step(positive_ids: Iterable[str], n_candidates: int, predicted_id: str | None,
               predicted_action: str | None, gold_action: str) -> StepScore:
    """Score one step. ``positive_ids`` are the positives inside top-k,
    ``n_candidates`` the number of top-k candidates (positives + negatives)."""
    positives = set(positive_ids)
    if not positives:
        return StepScore(0.0, 0.0, 0.0, NO_POSITIVE)
    if n_candidates <= 1:
        return StepScore(0.0, 0.0, 0.0, "single_candidate")
    if predicted_id is None or predicted_action is None:
        return StepScore(0.0, 0.0, 0.0, "no_prediction")
    element = 1.0 if predicted_id in positives else 0.0
    f1 = action_f1(predicted_action, gold_action)
    return StepScore(element, f1, 1.0 if element == 1.0 and f1 == 1.0 else 0.0)


@dataclass(frozen=True)
class TaskScore:
    annotation_id: str
    steps: tuple[StepScore, ...]
    upper_bound_ok: bool  # every step has a positive within top-k

    @property
    def element_acc(self) -> float:
        return fmean(s.element_correct for s in self.steps) if self.steps else 0.0

    @property
    def action_f1(self) -> float:
        return fmean(s.action_f1 for s in self.steps) if self.steps else 0.0

    @property
    def step_sr(self) -> float:
        return fmean(s.step_success for s in self.steps) if self.steps else 0.0

    @property
    def success(self) -> bool:
        return bool(self.steps) and all(s.step_success == 1.0 for s in self.steps)

    def as_dict(self) -> dict[str, float]:
        return {"element_acc": self.element_acc, "action_f1": self.action_f1,
                "step_sr": self.step_sr, "success": float(self.success),
                "upper_bound_ok": float(self.upper_bound_ok), "n_steps": float(len(self.steps))}


def official_kept(tasks: Sequence[TaskScore]) -> list[TaskScore]:
    """What the official macro scores and SR see: the official loop recomputes them
    after each step that has a positive candidate only, so the split's trailing steps
    without one (in split order) are left out — and a task left with none vanishes."""
    flat = [(t, s) for t in tasks for s in t.steps]
    last = max((i for i, (_, s) in enumerate(flat) if s.has_positive), default=-1)
    kept: dict[str, list[StepScore]] = {}
    for t, s in flat[:last + 1]:
        kept.setdefault(t.annotation_id, []).append(s)
    return [TaskScore(t.annotation_id, tuple(kept[t.annotation_id]), t.upper_bound_ok)
            for t in tasks if t.annotation_id in kept]


def aggregate(tasks: Sequence[TaskScore], mode: Mode = "official") -> dict[str, float]:
    """Micro / macro EA, AF1, SSR, task SR, Recall Cap @ top-k and the SR upper bound of
    a split; ``tasks`` in the split's order (mode ``official`` depends on it). The paper
    reports the macro numbers. ``official_dropped_steps``: steps the official macro
    scores and SR leave out (0 in mode ``corrected``)."""
    if not tasks:
        return {}
    ids = [t.annotation_id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"task {dup!r} appears twice in one split; score each pass apart")
    steps = [s for t in tasks for s in t.steps]
    counted = list(tasks) if mode == "corrected" else official_kept(tasks)
    dropped = len(steps) - sum(len(t.steps) for t in counted)

    def micro(attr: str) -> float:
        return fmean(getattr(s, attr) for s in steps) if steps else 0.0

    def macro(attr: str) -> float:
        return fmean(getattr(t, attr) for t in counted) if counted else 0.0

    return {
        "micro_element_acc": micro("element_correct"),
        "micro_action_f1": micro("action_f1"),
        "micro_step_sr": micro("step_success"),
        "macro_element_acc": macro("element_acc"),
        "macro_action_f1": macro("action_f1"),
        "macro_step_sr": macro("step_sr"),
        "task_sr": fmean(1.0 if t.success else 0.0 for t in counted) if counted else 0.0,
        "recall_cap": micro("has_positive"),
        "sr_upper_bound": fmean(1.0 if t.upper_bound_ok else 0.0 for t in tasks),
        "n_tasks": float(len(tasks)),
        "n_steps": float(len(steps)),
        "official_dropped_steps": float(dropped),
    }


def mean_over_passes(passes: Sequence[Sequence[TaskScore]], mode: Mode) -> dict[str, float]:
    """The split figures of each pass (a trial over the split, in split order), averaged."""
    runs = [aggregate(p, mode) for p in passes if p]
    return {k: fmean(r[k] for r in runs) for k in runs[0]} if runs else {}
