"""Mind2Web's offline metrics (MindAct evaluation, ``src/action_prediction/metric.py``).

Per step: element accuracy (the final chosen element is a positive that survived
top-k), action F1 (F1 over the *sets* of whitespace tokens of the predicted and gold
action strings, case-sensitive), step success (element correct and F1 == 1). A step
with no positive inside top-k, with no final prediction, or with a single top-k
candidate (no round is played) scores 0 on all three. Task success = every step
succeeds. Aggregates: micro (over steps) and macro (mean of per-task means); the SR
upper bound = share of tasks whose every step keeps a positive within top-k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean


def action_string(op: str, value: str = "") -> str:
    """``"OP"`` or ``"OP value"`` (what the benchmark compares)."""
    return f"{op.strip()} {value.strip()}".strip()


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


def score_step(positive_ids: Iterable[str], n_candidates: int, predicted_id: str | None,
               predicted_action: str | None, gold_action: str) -> StepScore:
    """Score one step. ``positive_ids`` are the positives inside top-k,
    ``n_candidates`` the number of top-k candidates (positives + negatives)."""
    positives = set(positive_ids)
    if not positives:
        return StepScore(0.0, 0.0, 0.0, "no_positive_in_top_k")
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


def aggregate(tasks: Sequence[TaskScore]) -> dict[str, float]:
    """Micro (over all steps) and macro (mean per task) EA / AF1 / SSR, task SR and
    the SR upper bound. The paper reports the macro numbers."""
    if not tasks:
        return {}
    steps = [s for t in tasks for s in t.steps]

    def micro(attr: str) -> float:
        return fmean(getattr(s, attr) for s in steps) if steps else 0.0

    return {
        "micro_element_acc": micro("element_correct"),
        "micro_action_f1": micro("action_f1"),
        "micro_step_sr": micro("step_success"),
        "macro_element_acc": fmean(t.element_acc for t in tasks),
        "macro_action_f1": fmean(t.action_f1 for t in tasks),
        "macro_step_sr": fmean(t.step_sr for t in tasks),
        "task_sr": fmean(1.0 if t.success else 0.0 for t in tasks),
        "sr_upper_bound": fmean(1.0 if t.upper_bound_ok else 0.0 for t in tasks),
        "n_tasks": float(len(tasks)),
        "n_steps": float(len(steps)),
    }
