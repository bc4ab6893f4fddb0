"""A scripted model's side of the strategies' formats: an agent that follows a plan of
tool calls, and a user who states a request once and then stops. The simulated engine's
τ²-bench player (``envs/tau2/sim_player.py``) and the scripted test server answer with
them; no model runs.

A request shows the conversation so far; the next call is the first planned call not yet
made (the calls already in the history are matched against the plan in order, so
unrelated calls in an initial message history are skipped). Tool calls are answered
natively when the request carries ``tools``, as ``<tool_call>`` text otherwise; when the
plan is done the agent calls the solo stop tool ``done`` (when it holds it) or sends its
final text.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

Call = tuple[str, dict[str, Any]]
STOP = "###STOP###"  # τ²-bench's signal that the user simulator ends the conversation
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


def is_solo(req: dict[str, Any]) -> bool:
    """The agent holds the solo stop tool ``done`` (natively or in its system prompt)."""
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
