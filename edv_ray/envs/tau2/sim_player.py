"""τ²-bench as the simulated engine plays it (see ``SimulatedPlayer`` in
:mod:`edv_ray.envs.protocol`): an agent that follows a plan of tool calls — the task's
gold actions, or a planted failure — and a user who states the task's reason for calling
once and then stops (the turns themselves: :mod:`edv_ray.agents.scripted_turns`).

A planted failure is built from what the task grades: leave out or spoil the last write
(``stop_early``, ``wrong_argument``), else withhold the information it must communicate,
else make a write it never asked for (another task's gold write); a task that grades no
state cannot fail.
"""

from __future__ import annotations

import html
import json
import re
import threading
from typing import Any

from edv_ray.agents.scripted_turns import STOP, Call, agent_turn, is_solo, user_turn
from edv_ray.envs.protocol import SimulatedPlay

_LOCK = threading.Lock()
_WRITES: dict[str, set[str]] = {}
_FOREIGN: dict[str, list] = {}
_CALL_LINE = re.compile(r"^assistant calls (\w+)\((.*)\)\s*$", re.MULTILINE)


def gold_plan(task, solo: bool = False) -> list[Call]:
    """The task's gold actions: the assistant's, and in solo mode the user's too (the solo
    agent holds the user's tools)."""
    acts = task.evaluation_criteria.actions or []
    return [(a.name, dict(a.arguments)) for a in acts if solo or a.requestor == "assistant"]


def first_request(task) -> str:
    """What the simulated user says first: its reason for calling (task-specific, so
    retrieval keyed on it finds similar tasks), else the first line of its instructions."""
    scenario = getattr(task, "user_scenario", None)
    instr = getattr(scenario, "instructions", None) if scenario is not None else None
    text = getattr(instr, "reason_for_call", None) or (instr if isinstance(instr, str) else "")
    text = " ".join(str(text or "").split())
    return text or "Hi, I need help with my request."


def grades_state(task) -> bool:
    """False when τ²-bench grades nothing of the end state (no actions, no assertions):
    such a task scores 1 whatever the agent does."""
    crit = task.evaluation_criteria
    return crit is not None and not (crit.actions is None and crit.env_assertions is None)


def write_tools(domain: str) -> set[str]:
    """Names of the domain's write tools (the agent's and the user's), once per process."""
    with _LOCK:
        if domain in _WRITES:
            return _WRITES[domain]
    from tau2.environment.toolkit import ToolType

    from edv_ray.envs.tau2.tasks import domain_state

    env = domain_state(domain).fresh_env()
    names = set()
    for kit in (env.tools, env.user_tools):
        if kit is not None:
            names |= {n for n in kit.get_tools() if kit.tool_type(n) == ToolType.WRITE}
    with _LOCK:
        return _WRITES.setdefault(domain, names)


def foreign_write(domain: str, task_id: str) -> Call | None:
    """A gold write of another task of the domain (first in task order), or None."""
    with _LOCK:
        cached = _FOREIGN.get(domain)
    if cached is None:
        from edv_ray.envs.tau2.tasks import load_domain_tasks

        writes = write_tools(domain)
        cached = [(t.id, a.name, dict(a.arguments)) for t in load_domain_tasks(domain, "all")
                  for a in (t.evaluation_criteria.actions or [])
                  if a.requestor == "assistant" and a.name in writes]
        with _LOCK:
            _FOREIGN[domain] = cached
    return next(((name, args) for tid, name, args in cached if tid != task_id), None)


# ---- planted failures --------------------------------------------------------------------
def _corrupt(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return value[:-1] if value else ["none"]
    if isinstance(value, dict):
        return {k: _corrupt(v) for k, v in value.items()}
    return f"{value}_x"


def failure_plan(gold: list[Call], mode: str, writes: set[str], communicates: bool,
                 foreign: Call | None, pick: float,
                 graded: bool = True) -> tuple[list[Call], bool, str]:
    """(plan, whether the final text tells the customer the task's info, mode used).

    ``stop_early``: the gold calls before the first write, then stop (no information
    given); ``wrong_argument``: the last write (whose effect is the one that stays) with
    one argument changed (``pick`` chooses which). Without a write action: withhold the
    information the task must communicate; without that either: a write the task never
    asked for (``foreign``, another task's gold write). ``none``: nothing can fail
    it (also when the task grades no state: ``graded`` false)."""
    if not graded:
        return gold, True, "none"
    at = [i for i, (name, _) in enumerate(gold) if name in writes]
    if at:
        last = at[-1]
        name, args = gold[last]
        if mode == "wrong_argument" and args:
            keys = sorted(args)
            key = keys[min(len(keys) - 1, int(pick * len(keys)))]
            bad = dict(args, **{key: _corrupt(args[key])})
            return gold[:last] + [(name, bad)] + gold[last + 1:], False, "wrong_argument"
        return gold[:at[0]], False, "stop_early"
    if communicates:
        return gold, False, "withhold_info"
    if foreign is not None:
        return gold + [foreign], False, "foreign_write"
    return gold, True, "none"


def task_failure_plan(domain: str, task, gold: list[Call], mode: str,
                      pick: float) -> tuple[list[Call], bool, str]:
    """:func:`failure_plan` for a τ²-bench task (what it grades decides what can fail it)."""
    crit = task.evaluation_criteria
    basis = {str(getattr(b, "value", b)) for b in crit.reward_basis or []}
    return failure_plan(gold, mode, write_tools(domain),
                        communicates=bool(crit.communicate_info) and "COMMUNICATE" in basis,
                        foreign=foreign_write(domain, task.id), pick=pick,
                        graded=grades_state(task))


def solo_outcome(transcript: str, task) -> bool | None:
    """A solo run's outcome from its rendered calls: the engine's failing plans always
    differ from the gold calls (None: cut short, or no call and no stop)."""
    text = html.unescape(transcript)
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
    if not calls and STOP not in text:
        return None
    return calls in (gold_plan(task, False), gold_plan(task, True))


class Tau2Player:
    """τ²-bench's ``SimulatedPlayer``."""

    gold_plan = staticmethod(gold_plan)  # the scripted test server replays it

    def warm_up(self, bench) -> None:
        for domain in bench.domains:
            write_tools(domain)

    def agent_message(self, domain: str, task, req: dict[str, Any],
                      play: SimulatedPlay) -> dict[str, Any]:
        info = ", ".join(task.evaluation_criteria.communicate_info or [])
        gold = gold_plan(task, is_solo(req))
        if play.success:
            return agent_turn(gold, req, f"All done. {info} {play.marker}".replace("  ", " "))
        plan, tell, _used = task_failure_plan(domain, task, gold, play.failure_mode,
                                              play.draw("argument"))
        text = "I am sorry, I could not complete your request."
        return agent_turn(plan, req, f"{text} {info if tell else ''} {play.marker}".replace("  ", " "))

    def user_message(self, domain: str, task, req: dict[str, Any]) -> dict[str, Any]:
        return user_turn(req, first_request(task))

    def run_outcome(self, domain: str, task, transcript: str) -> bool | None:
        return solo_outcome(transcript, task)

    def failure_path(self, domain: str, task, mode: str = "stop_early", solo: bool = False) -> str:
        """How a failing episode of this task fails: stop_early, wrong_argument,
        withhold_info, foreign_write — or "none" (no plan can fail it: always a success).
        Whether the benchmark then really grades it a failure is measured, per task, by
        ``experiments/bench/simulated_calibration.py`` (gold writes that fail even in the
        gold path leave nothing to omit: retail 12 and 105)."""
        return task_failure_plan(domain, task, gold_plan(task, solo), mode, 0.0)[2]


PLAYER = Tau2Player()
