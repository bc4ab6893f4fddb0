"""What a stage prompt shows about the runs in it: each run's planted outcome and whether
it is the asking agent's own.

The outcome is read, in order, from the run block's ``outcome`` attribute (the reward
shown), from the engine's run marker in the transcript (text turns carry one), or — for a
τ²-bench solo run, whose transcript has no text turn — by comparing the calls in the
transcript with the task's gold calls (the engine's failing plans always differ from
them). ``None``: unknown (e.g. a transcript cut short).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

from edv_ray.config import TAU2_DOMAINS
from edv_ray.serving.simulated.codec import Codec
from edv_ray.serving.simulated.prompt_read import Block
from edv_ray.serving.simulated.tau2_play import gold_plan

_CALL_LINE = re.compile(r"^assistant calls (\w+)\((.*)\)\s*$", re.MULTILINE)


@dataclass
class RunView:
    label: str
    success: bool | None
    own: bool
    judged: str | None  # a label stated in the prompt (ReasoningBank's self-judgement)
    outcome_shown: bool


def _tau2_outcome(body: str, task) -> bool | None:
    text = html.unescape(body)
    if "[...]" in text:
        return None
    calls = []
    for name, raw in _CALL_LINE.findall(text):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
        if name != "done":
            calls.append((name, args if isinstance(args, dict) else {}))
    if not calls and "###STOP###" not in text:
        return None
    return calls in (gold_plan(task, False), gold_plan(task, True))


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
        elif domain in TAU2_DOMAINS and task_id:
            success = _tau2_outcome(b.body, world.task(domain, task_id))
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
