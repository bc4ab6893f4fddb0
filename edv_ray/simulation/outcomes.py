"""What a stage prompt shows about the runs in it: each run's planted outcome and whether
it is the asking agent's own.

The truth is read from the engine's run marker in the transcript (text turns carry one),
else — for a run with no text turn, e.g. a τ²-bench solo run — from the run block's
``outcome`` attribute (the grade shown) or the benchmark's player
(``SimulatedPlayer.run_outcome``: τ²-bench's compares the calls with the task's gold
calls). ``None``: unknown (e.g. a transcript cut short).

What the asking role *believes* is the grade it is shown, when one is shown, else the
truth: a role shown a wrong grade (a framework that inverts or mixes up grades) acts on
the wrong one — a writer writes from "mislabelled" runs, a verifier thinks its own run
failed when it passed — and the engine compares the claim with its hidden marker.
"""

from __future__ import annotations

from dataclasses import dataclass

from edv_ray.simulation.codec import Codec
from edv_ray.simulation.prompt_read import Block


@dataclass
class RunView:
    label: str
    success: bool | None
    own: bool
    judged: str | None  # a label stated in the prompt (ReasoningBank's self-judgement)
    outcome_shown: bool
    believed: bool | None = None  # the grade shown, else the truth (see the module doc)

    @property
    def claimed(self) -> str | None:
        """The label the prompt states for this run: a self-judgement, else a grade shown."""
        if self.judged is not None:
            return self.judged
        return None if not self.outcome_shown else ("success" if self.believed else "failure")


def read_runs(blocks: list[Block], codec: Codec, agent: str, domain: str, task_id: str,
              world) -> list[RunView]:
    me = codec.h16(agent)
    out = []
    for b in blocks:
        mark = codec.run_mark(b.body)
        shown = b.attrs.get("outcome")
        graded = shown == "success" if shown in ("success", "failure") else None
        success: bool | None
        if mark is not None:
            success = mark.success
        elif graded is not None:
            success = graded
        elif domain and task_id:
            success = world.run_outcome(domain, task_id, b.body)
        else:
            success = None
        own = b.attrs.get("agent") == agent if "agent" in b.attrs else (
            mark is not None and mark.agent_hash == me)
        judged = b.attrs.get("judged")
        out.append(RunView(b.label, success, own, judged if judged in ("success", "failure") else None,
                           graded is not None, success if graded is None else graded))
    return out


def contrast(runs: list[RunView]) -> bool:
    """The runs, as the role sees them, hold a success and a failure."""
    return any(r.believed is True for r in runs) and any(r.believed is False for r in runs)


def mislabeled(runs: list[RunView]) -> bool:
    """Most runs with a stated label (RB's self-judgement, or a grade shown) are labelled
    against their planted outcome (for a single run: its label is wrong)."""
    labelled = [r for r in runs if r.claimed is not None and r.success is not None]
    wrong = sum((r.claimed == "success") != r.success for r in labelled)
    return bool(labelled) and 2 * wrong > len(labelled)
