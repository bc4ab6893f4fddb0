"""What a stage prompt shows about the runs in it: each run's planted outcome and whether
it is the asking agent's own.

The outcome is read, in order, from the run block's ``outcome`` attribute (the reward
shown), from the engine's run marker in the transcript (text turns carry one), or — for a
run with no text turn, e.g. a τ²-bench solo run — by the benchmark's player
(``SimulatedPlayer.run_outcome``: τ²-bench's compares the calls with the task's gold
calls). ``None``: unknown (e.g. a transcript cut short).
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


def read_runs(blocks: list[Block], codec: Codec, agent: str, domain: str, task_id: str,
              world) -> list[RunView]:
    me = codec.h16(agent)
    out = []
    for b in blocks:
        mark = codec.run_mark(b.body)
        shown = b.attrs.get("outcome")
        if shown in ("success", "failure"):
            success: bool | None = shown == "success"
        elif mark is not None:
            success = mark.success
        elif domain and task_id:
            success = world.run_outcome(domain, task_id, b.body)
        else:
            success = None
        own = b.attrs.get("agent") == agent if "agent" in b.attrs else (
            mark is not None and mark.agent_hash == me)
        judged = b.attrs.get("judged")
        out.append(RunView(b.label, success, own, judged if judged in ("success", "failure") else None,
                           shown in ("success", "failure")))
    return out


def contrast(runs: list[RunView]) -> bool:
    return any(r.success is True for r in runs) and any(r.success is False for r in runs)


def mislabeled(runs: list[RunView]) -> bool:
    """Most runs with a stated label (RB's self-judgement) are labelled against their
    planted outcome (for a single run: its label is wrong)."""
    labelled = [r for r in runs if r.judged is not None and r.success is not None]
    wrong = sum((r.judged == "success") != r.success for r in labelled)
    return bool(labelled) and 2 * wrong > len(labelled)
