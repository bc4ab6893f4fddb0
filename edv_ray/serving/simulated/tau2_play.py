"""Playing τ²-bench from the server side: an agent that follows a plan of tool calls (the
task's gold actions, or a planted failure), and a user who states a request once and
then stops. Shared by the simulated engine and the scripted test server.

A request shows the conversation so far; the next call is the first planned call not yet
made (the calls already in the history are matched against the plan in order, so
unrelated calls in an initial message history are skipped). Tool calls are answered
natively when the request carries ``tools``, as ``<tool_call>`` text otherwise; when the
plan is done the agent calls ``done`` (solo mode) or sends its final text.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

Call = tuple[str, dict[str, Any]]
STOP = "###STOP###"
_TOOL_BLOCK = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def tool_names(req: dict[str, Any]) -> set[str]:
    names = {t.get("function", {}).get("name") for t in req.get("tools") or []}
    system = " ".join(m.get("content") or "" for m in req["messages"] if m["role"] == "system")
    if '"name": "done"' in system:
        names.add("done")
    return names


def call_message(name: str, args: dict[str, Any], native: bool) -> dict[str, Any]:
    if native:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{uuid.uuid4().hex[:10]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}
    body = json.dumps({"name": name, "arguments": args})
    return {"role": "assistant", "content": f"<tool_call>\n{body}\n</tool_call>"}


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


def calls_made(messages: list[dict[str, Any]]) -> list[Call]:
    """The assistant's tool calls in a request's history, in order (native or text)."""
    out: list[Call] = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function", tc)
            out.append((fn.get("name", ""), _args(fn.get("arguments"))))
        for body in _TOOL_BLOCK.findall(m.get("content") or ""):
            try:
                obj = json.loads(body)
            except json.JSONDecodeError:
                continue
            out.append((obj.get("name", ""), _args(obj.get("arguments"))))
    return out


def progress(plan: list[Call], messages: list[dict[str, Any]]) -> int:
    """How many planned calls the history already holds (matched in order)."""
    j = 0
    for call in calls_made(messages):
        if j < len(plan) and call == plan[j]:
            j += 1
    return j


def gold_plan(task, solo: bool = False) -> list[Call]:
    """The task's gold actions: the assistant's, and in solo mode the user's too (the solo
    agent holds the user's tools)."""
    acts = task.evaluation_criteria.actions or []
    return [(a.name, dict(a.arguments)) for a in acts if solo or a.requestor == "assistant"]


def is_solo(req: dict[str, Any]) -> bool:
    return "done" in tool_names(req)


def agent_turn(plan: list[Call], req: dict[str, Any], final_text: str) -> dict[str, Any]:
    """The next planned call, then ``done`` (solo) or ``final_text``."""
    native = bool(req.get("tools"))
    n = progress(plan, req["messages"])
    if n < len(plan):
        return call_message(plan[n][0], plan[n][1], native)
    if is_solo(req):
        return call_message("done", {}, native)
    return {"role": "assistant", "content": final_text}


def user_turn(req: dict[str, Any], first_text: str, later_text: str = f"Thanks. {STOP}") -> dict[str, Any]:
    """The user simulator: ``first_text`` until it has said it (an initial message history
    holds other user turns), then stop. The user's own turns are its request's
    ``assistant`` messages (τ²-bench flips the roles for the user)."""
    said = any(m["role"] == "assistant" and (m.get("content") or "") == first_text
               for m in req["messages"])
    return {"role": "assistant", "content": later_text if said else first_text}


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


def failure_plan(gold: list[Call], mode: str, write_tools: set[str], communicates: bool,
                 foreign_write: Call | None, pick: float,
                 graded: bool = True) -> tuple[list[Call], bool, str]:
    """(plan, whether the final text tells the customer the task's info, mode used).

    ``stop_early``: the gold calls before the first write, then stop (no information
    given); ``wrong_argument``: the last write (whose effect is the one that stays) with
    one argument changed (``pick`` chooses which). Without a write action: withhold the information the task must
    communicate; without that either: a write the task never asked for
    (``foreign_write``, another task's gold write). ``none``: nothing can fail it (also
    when the task grades no state: ``graded`` false)."""
    if not graded:
        return gold, True, "none"
    writes = [i for i, (name, _) in enumerate(gold) if name in write_tools]
    if writes:
        last = writes[-1]
        name, args = gold[last]
        if mode == "wrong_argument" and args:
            keys = sorted(args)
            key = keys[min(len(keys) - 1, int(pick * len(keys)))]
            bad = dict(args, **{key: _corrupt(args[key])})
            return gold[:last] + [(name, bad)] + gold[last + 1:], False, "wrong_argument"
        return gold[:writes[0]], False, "stop_early"
    if communicates:
        return gold, False, "withhold_info"
    if foreign_write is not None:
        return gold + [foreign_write], False, "foreign_write"
    return gold, True, "none"


def task_failure_plan(task, gold: list[Call], mode: str, write_tools: set[str],
                      foreign_write: Call | None, pick: float) -> tuple[list[Call], bool, str]:
    """:func:`failure_plan` for a τ²-bench task (what it grades decides what can fail it)."""
    crit = task.evaluation_criteria
    basis = {str(getattr(b, "value", b)) for b in crit.reward_basis or []}
    return failure_plan(gold, mode, write_tools,
                        communicates=bool(crit.communicate_info) and "COMMUNICATE" in basis,
                        foreign_write=foreign_write, pick=pick, graded=grades_state(task))
