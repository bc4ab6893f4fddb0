"""Prompt strategies: how an agent sees tools and how its answers become tool calls.

Pure functions over plain chat messages (no tau2, no Ray), so any environment can use
them. Three strategies ship:

* ``native_tools`` — tools go in the request's ``tools=`` field; the server's parser
  returns ``tool_calls`` (vLLM with a tool-call parser, hosted APIs).
* ``text_tools`` — tools are rendered into the system prompt and the model writes
  ``<tool_call>{json}</tool_call>``; we parse it. Needed for small models behind
  llama.cpp, whose calls come back as text (measured; see README, "What the embedded
  models can and cannot do").
* ``text_tools_plan`` — as ``text_tools`` but each turn starts with a ``Plan:`` line
  (a different prompt strategy for pool heterogeneity); the plan is kept out of the
  customer-facing text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from edv_ray.agents.toolcall_json import depth_within, json_objects, loads_bounded
from edv_ray.prompts import experiences_block, render_prompt


@dataclass(frozen=True)
class ParsedTurn:
    """What one model answer means: a message to the other side, or tool calls."""

    text: str | None
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments": dict}]


@dataclass(frozen=True)
class Strategy:
    name: str
    prompt: str
    native_tools: bool


STRATEGIES: dict[str, Strategy] = {
    "native_tools": Strategy("native_tools", "agent_native_tools.v2", True),
    "text_tools": Strategy("text_tools", "agent_text_tools.v2", False),
    "text_tools_plan": Strategy("text_tools_plan", "agent_text_tools_plan.v2", False),
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown prompt strategy {name!r}; known: {sorted(STRATEGIES)}") from None


def render_system_prompt(
    strategy: Strategy,
    policy: str,
    tool_schemas: list[dict[str, Any]],
    experiences: list[str],
    ticket: str | None = None,
    stop_tool: str = "done",
) -> str:
    """The agent's system prompt, ordered for servers' prefix caches (v2 templates):
    role, tools and policy first — identical for every task of a domain and strategy —
    then the retrieved experiences, then the task-specific part (the ticket in solo
    mode) last, so episodes share the longest possible cached prefix."""
    if ticket is not None:
        mode = render_prompt("agents", "mode_solo.v1", ticket=ticket, stop_tool=stop_tool)
    else:
        mode = render_prompt("agents", "mode_conversation.v1")
    block = experiences_block("agents", experiences)  # memory text came from models: fenced
    tools = "\n".join(json.dumps(s["function"] if "function" in s else s) for s in tool_schemas)
    return render_prompt(
        "agents", strategy.prompt, mode_instructions=mode, policy=policy.strip(),
        tools=tools, experiences_block=block,
    )


_TOOL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_PLAN = re.compile(r"^\s*Plan:.*?(?:\n|$)", re.IGNORECASE)


def _as_call(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = loads_bounded(args)
        except ValueError:  # not JSON, too long or nested too deep: no usable call
            return None
    elif not depth_within(args):
        return None
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "name": name, "arguments": args}


def _first_call(text: str) -> dict[str, Any] | None:
    return next((c for c in map(_as_call, json_objects(text)) if c), None)


def parse_text_turn(content: str | None, strategy: Strategy) -> ParsedTurn:
    """Turn a text answer into tool calls or a customer message.

    Calls are read from ``<tool_call>`` blocks; failing that, from any JSON object in
    the answer shaped like a call (``{"name": ..., "arguments": {...}}``, fenced or
    bare, a missing final brace repaired). Text with no usable call is a message: the
    model failed to act — an agent failure the benchmark grades, never a crash. The
    search is bounded (:mod:`edv_ray.agents.toolcall_json`: size, work, nesting), so a
    hostile answer (400 KB of ``{``, JSON nested 1,000 deep) is such a failure too."""
    text = (content or "").strip()
    if strategy.name == "text_tools_plan":
        text = _PLAN.sub("", text, count=1).strip()
    calls = [c for c in (_first_call(block) for block in _TOOL_BLOCK.findall(text)) if c]
    if not calls:
        call = _first_call(text)
        calls = [call] if call else []
    if calls:
        return ParsedTurn(text=None, tool_calls=calls)
    text = _TOOL_BLOCK.sub("", text).strip()
    return ParsedTurn(text=text or None, tool_calls=[])


def parse_native_turn(content: str | None, tool_calls: list[dict[str, Any]]) -> ParsedTurn:
    """Native tool calls (arguments as a JSON string) → ParsedTurn. Arguments that are
    not a JSON object make the call unusable: the turn falls back to its text."""
    calls = []
    for tc in tool_calls:
        try:
            args = loads_bounded(tc.get("arguments") or "{}")
        except ValueError:  # not JSON, too long or nested too deep (never a crash)
            args = None
        if isinstance(args, dict) and tc.get("name"):
            calls.append({"id": tc.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                          "name": tc["name"], "arguments": args})
    if calls:
        return ParsedTurn(text=None, tool_calls=calls)
    text = (content or "").strip()
    return ParsedTurn(text=text or None, tool_calls=[])


def text_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat history for text strategies: no ``tool`` role and no ``tool_calls`` field
    (llama.cpp templates differ on both). Assistant calls become ``<tool_call>``
    blocks; tool results become user turns wrapped in ``<tool_response>``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant" and m.get("tool_calls"):
            blocks = []
            for tc in m["tool_calls"]:
                fn = tc.get("function", tc)
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    args = json.loads(args or "{}")
                payload = {"name": fn["name"], "arguments": args}
                blocks.append(f"<tool_call>\n{json.dumps(payload)}\n</tool_call>")
            out.append({"role": "assistant", "content": "\n".join(blocks)})
        elif role == "tool":
            body = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + body}
            else:
                out.append({"role": "user", "content": body})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return out
