"""MMTB as the simulated engine plays it (see ``SimulatedPlayer`` in
:mod:`edv_ray.envs.protocol`): its dialogues answered from the server side.

Each request is one model turn of one mission, played in the gold context of the
dialogue so far (see ``envs/mmtb/episode.py``). The mission is the one whose gold
context the request's history starts with; the turn is the number of assistant turns
since. The gold plan of a mission walks its call graph with the benchmark's own judge:
every ready call at once, else the clarifying question, else the final answer.
Playing to fail, on the failing mission's first turn: answer in text where a call is
due (``stop_early``) or call with wrong arguments (``wrong_argument``); where text is
due, call a tool instead.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from edv_ray.agents.strategies import text_history
from edv_ray.envs.file_env import FilePlayer
from edv_ray.envs.mmtb.callgraph import CallGraph, GraphTooLarge
from edv_ray.envs.mmtb.data import ASK, SPECIAL
from edv_ray.envs.protocol import SimulatedPlay, memo

_LOCK = threading.Lock()
_PLANS: dict[str, list] = {}
_PREFIXES: dict[str, list] = {}


def mission_plan(dialogue, mission) -> list[tuple[str, Any]]:
    """[("calls", [GoldNode, ...]) | ("text", GoldNode)] in order: the shortest valid
    path of the mission's call graph whose clarification / answer steps stand alone."""
    try:
        graph = CallGraph(mission.nodes, "corrected")
    except GraphTooLarge:
        return []
    names = graph.names

    def plain(path) -> bool:
        return all(len(s) == 1 for s in path if any(names[i] in SPECIAL for i in s))

    paths = sorted(graph.alive, key=len)
    chosen = next((p for p in paths if plain(p)), paths[0] if paths else ())
    turns: list[tuple[str, Any]] = []
    for step in chosen:
        nodes = [mission.nodes[i] for i in step]
        calls = sorted((n for n in nodes if n.name not in SPECIAL), key=lambda n: n.name)
        if calls:
            turns.append(("calls", calls))
            continue
        turns.append(("text", nodes[0]))
        if nodes[0].name != ASK:
            break
    return turns



def _prefixes(dialogue) -> list[list[dict[str, Any]]]:
    """Per mission, the chat history (after the system prompt) its first turn sees."""
    out, history = [], []
    for m in dialogue.missions:
        context = [dict(x) for x in m.segment[:m.task_id + 1]]
        out.append(text_history(history + context))
        history += [dict(x) for x in m.segment]
    return out


def locate(dialogue, messages: list[dict[str, Any]]) -> tuple[int, int]:
    """(mission index, turn index within the mission) of a request."""
    chat = [(m.get("role"), m.get("content") or "") for m in messages[1:]]
    prefixes = memo(_PREFIXES, dialogue.id, lambda: _prefixes(dialogue), _LOCK)
    for i in range(len(prefixes) - 1, -1, -1):
        p = [(m["role"], m.get("content") or "") for m in prefixes[i]]
        if chat[:len(p)] == p:
            return i, sum(1 for role, _ in chat[len(p):] if role == "assistant")
    return 0, sum(1 for role, _ in chat if role == "assistant")


def _calls_text(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join("<tool_call>\n" + json.dumps({"name": n, "arguments": a}, ensure_ascii=False)
                     + "\n</tool_call>" for n, a in calls)


def _spoil(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (v + 1 if isinstance(v, (int, float)) and not isinstance(v, bool)
                else "unrelated value zq") for k, v in args.items()}


def _text_for(node) -> str:
    if node.name == ASK:
        missing = node.arguments.get("missing_required_parameters") or ["the details"]
        return "Could you tell me " + ", ".join(map(str, missing)) + "?"
    obs = node.observation
    return obs if isinstance(obs, str) and obs.strip() else "Here is what I found."


def answer(dialogue, messages: list[dict[str, Any]], fail_mission: int | None, mode: str,
           marker: str) -> str:
    """The turn's reply text; text turns carry ``marker``."""
    m, k = locate(dialogue, messages)
    mission = dialogue.missions[m]
    plan = memo(_PLANS, f"{dialogue.id}\x1f{m}", lambda: mission_plan(dialogue, mission), _LOCK)
    if m == fail_mission and k == 0 and plan:
        kind, what = plan[0]
        if kind == "calls" and mode == "wrong_argument" and all(n.arguments for n in what):
            return _calls_text([(n.name, _spoil(n.arguments)) for n in what])
        if kind == "calls":
            return f"I am not able to do that. {marker}"
        tools = [t.get("function", t).get("name") for t in dialogue.tools]
        tools = [t for t in tools if t and t not in SPECIAL]
        if tools:
            return _calls_text([(tools[0], {})])
    if k >= len(plan):
        return f"Done. {marker}"
    kind, what = plan[k]
    if kind == "calls":
        return _calls_text([(n.name, n.arguments) for n in what])
    return f"{_text_for(what)} {marker}"


class MMTBPlayer(FilePlayer):
    """MMTB's ``SimulatedPlayer``: a failing episode fails at one drawn mission."""

    def agent_message(self, domain: str, task, req: dict[str, Any],
                      play: SimulatedPlay) -> dict[str, Any]:
        fail = None if play.success else play.choose(list(range(len(task.missions))), "fail_mission")
        return {"role": "assistant",
                "content": answer(task, req["messages"], fail, play.failure_mode, play.marker)}
