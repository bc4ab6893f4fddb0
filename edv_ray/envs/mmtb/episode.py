"""Play one MMTB dialogue mission by mission, as the official request pipeline does.

Mission i is played in the context of the *gold* dialogue so far (every earlier
mission's gold messages, then this mission's messages up to its task), never the
model's own earlier answers. Each model turn is ``complete(messages) -> str`` over a
text-tools chat (calls written as ``<tool_call>{json}</tool_call>`` and parsed with
:func:`edv_ray.agents.strategies.parse_text_turn`; tool results come back as
``<tool_response>`` user turns). Scoring is :mod:`.callgraph` (stage 1, each turn) and
:mod:`.arguments` (stage 2, when the final answer comes); ``metrics`` = "official" or
"corrected" (see the package README). Accepted calls get the gold observations of the
step's gold nodes — official: in the order of the nodes' names, whatever the calls'
order; corrected: each call its own node's result (same name, closest arguments). A clarifying question gets the gold
``user_input``. Experiences go into the system prompt.

The score is settled at the first rejected turn, as in the official code. The mission
then goes on off the record, so that every mission ends the same way whether it was
right or wrong (judging roles must not read the verdict off the transcript's shape):
calls get ``NO_RESULT`` as their result until the model answers in text (or the turn
cap, the gold node count + 1, is reached).

Transcript (``messages``): the system prompt, then per mission a marker
``{"role": "system", "content": "===== mission k ====="}`` (no gold label), the
mission's context messages as the model saw them and the turns played (OpenAI format:
assistant ``tool_calls`` with JSON-string arguments, ``tool`` results). Earlier
missions show as the model played them (it was shown their gold dialogue).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from edv_ray.agents.strategies import get_strategy, parse_text_turn, text_history
from edv_ray.envs.mmtb.arguments import check_arguments_raising, score_call
from edv_ray.envs.mmtb.callgraph import CallGraph, Crash, GraphTooLarge
from edv_ray.envs.mmtb.data import ASK, Dialogue, GoldNode, Mission
from edv_ray.envs.mmtb.metrics import MissionResult, answer_structure, breakdown
from edv_ray.prompts import experiences_block, render_prompt
from edv_ray.prompts.budget import keep_end

Complete = Callable[[list[dict[str, Any]]], str]
PROMPTS = "envs/mmtb"  # render_prompt package path: edv_ray/envs/mmtb/prompts/
_TEXT_TOOLS = get_strategy("text_tools")
NO_RESULT = "No result is available for this call."


def observed_text(dialogue: Dialogue) -> str:
    """The first user message of the dialogue (what the agent sees first)."""
    for m in dialogue.missions[0].segment:
        if m["role"] == "user":
            return m["content"]
    return dialogue.missions[0].task


def task_type(dialogue: Dialogue) -> str:
    """The dialogue's mission-type mix, e.g. "chat+multi+single" (sorted, distinct):
    MMTB entries carry no category, and the mix is what varies between dialogues."""
    return "+".join(sorted({m.kind for m in dialogue.missions}))


def instructions() -> str:
    return render_prompt(PROMPTS, "instructions.v1")


def system_prompt(dialogue: Dialogue, mission: Mission, experiences: Sequence[str] = ()) -> str:
    block = experiences_block(PROMPTS, experiences)  # stored lessons are fenced data
    tools = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False)
                      for t in dialogue.tools)
    return render_prompt(PROMPTS, "system.v1", env_info=mission.env_info or "unknown",
                         tools=tools, experiences_block=block)


@dataclass
class MissionRecord:
    index: int
    type: str
    kind: str
    structure: str | None
    correct: bool
    # stage 1: a valid path through the call graph (official: False as well where the
    # argument check raised — the official analysis relabels the mission "error")
    calls_correct: bool
    arguments_correct: bool  # stage 2 (False when stage 1 failed)
    optimal: bool
    turns: int  # turns scored (the official step count)
    min_turns: int
    # "" | empty_reply | text_where_call_due | wrong_calls | arguments |
    # argument_check_raised (official) | turn_limit | graph_too_large | official_crash |
    # dropped (after an official crash)
    reason: str
    recorded: bool = True  # False: the official pipeline never scores this mission
    extra_turns: int = 0  # turns played off the record after the verdict
    predicted_calls: list[dict[str, Any]] = field(default_factory=list)
    argument_scores: list[float] = field(default_factory=list)


@dataclass
class EpisodeOutcome:
    task_id: str
    success: bool  # every mission correct
    reward: float  # share of missions correct
    metrics: dict[str, Any]
    missions: list[MissionRecord]
    messages: list[dict[str, Any]] = field(default_factory=list)
    metrics_mode: str = "official"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _observation(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _results(calls: list[dict[str, Any]], ids: list[str], nodes: list[GoldNode] | None,
             mode: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool messages answering one turn. ``nodes`` = the step's gold nodes sorted by
    name (None: the turn is off the record)."""
    if nodes is None:
        return [{"role": "tool", "tool_call_id": i, "content": NO_RESULT} for i in ids]
    if mode == "official":  # results in name order, under the ids in call order
        return [{"role": "tool", "tool_call_id": i, "content": _observation(n.observation)}
                for i, n in zip(ids, nodes)]
    free, mine = list(nodes), []
    for c in calls:  # each call its own node: same name, closest arguments
        tool = next((t for t in tools if t.get("function", t).get("name") == c["name"]), None)
        node = max((n for n in free if n.name == c["name"]),
                   key=lambda n: score_call(c["arguments"], n.arguments, tool, strict=False))
        free.remove(node)
        mine.append(node)
    return [{"role": "tool", "tool_call_id": i, "content": _observation(n.observation)}
            for i, n in zip(ids, mine)]


@dataclass
class _Play:
    """One mission in progress."""
    graph: CallGraph | None
    played: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # scored calls
    reason: str = ""
    finished: bool = False  # stage 1 passed
    crashed: bool = False
    extra: int = 0

    @property
    def scoring(self) -> bool:
        return self.graph is not None and not (self.reason or self.finished or self.crashed)


def _turn(play: _Play, mission: Mission, reply: str, turn: int, mode: str,
          tools: list[dict[str, Any]]) -> bool:
    """Apply one model turn; True when the mission goes on."""
    parsed = parse_text_turn(reply, _TEXT_TOOLS)
    scoring = play.scoring
    if not scoring:
        play.extra += 1
    if parsed.tool_calls:
        calls = [{"name": c["name"], "arguments": c["arguments"]} for c in parsed.tool_calls]
        ids = [f"call_{mission.index}_{turn}_{j}" for j in range(len(calls))]
        play.played.append({"role": "assistant", "content": reply, "tool_calls": [
            {"id": i, "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"],
                                                                     ensure_ascii=False)}}
            for i, c in zip(ids, calls)]})
        nodes = None
        if scoring:
            try:
                nodes = play.graph.accept_calls([c["name"] for c in calls])
            except Crash:
                play.crashed = True
                return False
            play.calls += calls
            play.reason = "" if nodes is not None else "wrong_calls"
        play.played += _results(calls, ids, nodes, mode, tools)
        return True
    play.played.append({"role": "assistant", "content": reply})
    if not scoring:
        return False
    if not parsed.text:
        play.reason = "empty_reply"
        return False
    try:
        node = play.graph.accept_text()
    except Crash:
        play.crashed = True
        return False
    if node is None:
        play.reason = "text_where_call_due"
        return False
    if node.name == ASK:
        play.played.append({"role": "user", "content": str(node.user_input or "")})
        return True
    play.finished = True
    return False


def _play_mission(dialogue: Dialogue, mission: Mission, complete: Complete, system: str,
                  transcript: list[dict[str, Any]], mode: str) -> MissionRecord:
    history: list[dict[str, Any]] = []
    for earlier in dialogue.missions[:mission.index]:
        history += [dict(m) for m in earlier.segment]
    context = [dict(m) for m in mission.segment[:mission.task_id + 1]]
    transcript.append({"role": "system", "content": f"===== mission {mission.index + 1} ====="})
    transcript += context
    try:
        play = _Play(CallGraph(mission.nodes, mode))
    except GraphTooLarge:
        play = _Play(None, reason="graph_too_large")
    if play.graph is not None:
        for turn in range(len(mission.nodes) + 1):
            chat = [{"role": "system", "content": system}] + text_history(
                history + context + play.played)
            if not _turn(play, mission, complete(chat) or "", turn, mode, dialogue.tools):
                break
        else:
            play.reason = play.reason or "turn_limit"
    transcript += play.played
    args_ok, scores, raised = (check_arguments_raising(play.calls, mission.nodes, dialogue.tools,
                                                       strict=mode == "official")
                               if play.finished else (False, [], False))
    reason = ("official_crash" if play.crashed else play.reason
              or ("" if args_ok else "argument_check_raised" if raised else "arguments"))
    graph = play.graph
    return MissionRecord(
        index=mission.index, type=mission.type, kind=mission.kind,
        structure=answer_structure(mission.nodes), correct=play.finished and args_ok,
        calls_correct=play.finished and not raised, arguments_correct=args_ok,
        optimal=play.finished and graph.optimal(), turns=graph.turns if graph else 0,
        min_turns=graph.min_turns if graph else 0, reason=reason, recorded=not play.crashed,
        extra_turns=play.extra, predicted_calls=play.calls, argument_scores=scores)


def _dropped(mission: Mission) -> MissionRecord:
    return MissionRecord(index=mission.index, type=mission.type, kind=mission.kind,
                         structure=answer_structure(mission.nodes), correct=False,
                         calls_correct=False, arguments_correct=False, optimal=False, turns=0,
                         min_turns=0, reason="dropped", recorded=False)


def run_episode(dialogue: Dialogue, complete: Complete, experiences: Sequence[str] = (),
                seed: int = 0, metrics: str = "official") -> EpisodeOutcome:
    """Play every mission of ``dialogue``. ``seed`` is accepted for the common episode
    interface; MMTB's replay is deterministic given the model's answers. After an
    official crash (``metrics="official"``) the dialogue's later missions are not played
    (the official pipeline drops them): they count as failures in ``reward`` and are
    left out of the figures."""
    del seed
    transcript: list[dict[str, Any]] = []
    records: list[MissionRecord] = []
    for mission in dialogue.missions:
        if records and records[-1].reason in ("official_crash", "dropped"):
            records.append(_dropped(mission))
            continue
        system = system_prompt(dialogue, mission, experiences)
        if not transcript:
            transcript.append({"role": "system", "content": system})
        records.append(_play_mission(dialogue, mission, complete, system, transcript, metrics))
    results = mission_results(records)
    correct = sum(r.correct for r in records)
    figures = {k: v for k, v in breakdown(results).items() if v is not None}
    return EpisodeOutcome(task_id=dialogue.id, success=correct == len(records),
                          reward=correct / len(records) if records else 0.0,
                          metrics=figures, missions=records, messages=transcript,
                          metrics_mode=metrics)


def mission_results(records: Sequence[MissionRecord]) -> list[MissionResult]:
    """Records → the judge's results (feed outcomes of many dialogues to ``breakdown``)."""
    return [MissionResult(r.kind, r.structure, r.correct, r.optimal, r.recorded) for r in records]


def render_trajectory(messages: Sequence[dict[str, Any]], max_chars: int = 4000) -> str:
    """Text of a transcript for the judging roles: tool calls as ``name(args)``, every
    turn whole, the whole cut to its last ``max_chars`` characters (the cut marked:
    :func:`edv_ray.prompts.budget.keep_end`); the system prompt is
    left out. Holds only what the model saw and did (the transcript has no gold label,
    and rejected missions end like accepted ones, see the module docstring)."""
    lines = []
    for i, m in enumerate(messages):
        role, text = m.get("role", "?"), str(m.get("content") or "").strip()
        if role == "system":
            if i:
                lines.append(text)
            continue
        if m.get("tool_calls"):
            text = "; ".join(f"{tc['function']['name']}({tc['function']['arguments']})"
                             for tc in m["tool_calls"])
            role = "assistant→tools"
        lines.append(f"[{role}] {text}")
    return keep_end("\n".join(lines), max_chars)[0]
