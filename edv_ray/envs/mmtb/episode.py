"""Play one MMTB dialogue mission by mission, as the official request pipeline does.

Mission i is played in the context of the *gold* dialogue so far (every earlier
mission's gold messages, then this mission's messages up to its task), never the
model's own earlier answers. Each model turn is ``complete(messages) -> str`` over a
text-tools chat (calls written as ``<tool_call>{json}</tool_call>`` and parsed with
:func:`edv_ray.agents.strategies.parse_text_turn`; tool results come back as
``<tool_response>`` user turns). Accepted calls get the gold observations of the gold
nodes they were paired with; a clarifying question gets the gold ``user_input``.
The mission ends at the first rejected turn (wrong) or at the final text answer
(then arguments are checked). Experiences go into the system prompt.

Transcript (``messages``): the system prompt, then per mission a marker
``{"role": "system", "content": "===== mission k (kind) ====="}``, the mission's
gold context messages and the turns played (OpenAI format: assistant
``tool_calls`` with JSON-string arguments, ``tool`` results).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from edv_ray.agents.strategies import get_strategy, parse_text_turn, text_history
from edv_ray.envs.mmtb.data import ASK, Dialogue, Mission
from edv_ray.envs.mmtb.metrics import (
    MissionJudge,
    MissionResult,
    answer_structure,
    breakdown,
    check_arguments,
)
from edv_ray.envs.selection import keep_end
from edv_ray.prompts import experiences_block, render_prompt

Complete = Callable[[list[dict[str, Any]]], str]
PROMPTS = "envs/mmtb"  # render_prompt package path: edv_ray/envs/mmtb/prompts/
_TEXT_TOOLS = get_strategy("text_tools")


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
    calls_correct: bool  # stage 1: a valid path through the call graph
    arguments_correct: bool  # stage 2 (False when stage 1 failed)
    optimal: bool
    turns: int
    min_turns: int
    reason: str  # "" | empty_reply | text_where_call_due | wrong_calls | arguments | turn_limit
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _observation(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _play_mission(dialogue: Dialogue, mission: Mission, complete: Complete, system: str,
                  transcript: list[dict[str, Any]]) -> MissionRecord:
    history: list[dict[str, Any]] = []
    for earlier in dialogue.missions[:mission.index]:
        history += [dict(m) for m in earlier.segment]
    context = [dict(m) for m in mission.segment[:mission.task_id + 1]]
    played: list[dict[str, Any]] = []
    transcript.append({"role": "system",
                       "content": f"===== mission {mission.index + 1} ({mission.kind}) ====="})
    transcript += context
    judge = MissionJudge(mission.nodes, dialogue.tools)
    calls_made: list[dict[str, Any]] = []
    reason, finished = "", False
    for turn in range(len(mission.nodes) + 1):
        chat = [{"role": "system", "content": system}] + text_history(history + context + played)
        reply = complete(chat) or ""
        parsed = parse_text_turn(reply, _TEXT_TOOLS)
        if parsed.tool_calls:
            calls = [{"name": c["name"], "arguments": c["arguments"]} for c in parsed.tool_calls]
            nodes = judge.accept_calls(calls)
            ids = [f"call_{mission.index}_{turn}_{j}" for j in range(len(calls))]
            played.append({"role": "assistant", "content": reply, "tool_calls": [
                {"id": i, "type": "function",
                 "function": {"name": c["name"],
                              "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                for i, c in zip(ids, calls)]})
            calls_made += calls
            if nodes is None:
                reason = "wrong_calls"
                break
            for call_id, node in zip(ids, nodes):
                played.append({"role": "tool", "tool_call_id": call_id,
                               "content": _observation(node.observation)})
            for node in nodes:  # a call to the clarification "tool" still gets the reply
                if node.name == ASK and node.user_input:
                    played.append({"role": "user", "content": str(node.user_input)})
            continue
        played.append({"role": "assistant", "content": reply})
        if not parsed.text:
            reason = "empty_reply"
            break
        node = judge.accept_text()
        if node is None:
            reason = "text_where_call_due"
            break
        if node.name == ASK:
            played.append({"role": "user", "content": str(node.user_input or "")})
            continue
        finished = True
        break
    else:
        reason = "turn_limit"
    transcript += played
    args_ok, scores = check_arguments(calls_made, mission.nodes, dialogue.tools) if finished \
        else (False, [])
    if finished and not args_ok:
        reason = "arguments"
    min_turns = judge.min_turns()
    return MissionRecord(
        index=mission.index, type=mission.type, kind=mission.kind,
        structure=answer_structure(mission.nodes), correct=finished and args_ok,
        calls_correct=finished, arguments_correct=args_ok,
        optimal=finished and judge.turns == min_turns, turns=judge.turns,
        min_turns=min_turns, reason=reason, predicted_calls=calls_made, argument_scores=scores,
    )


def run_episode(dialogue: Dialogue, complete: Complete, experiences: Sequence[str] = (),
                seed: int = 0) -> EpisodeOutcome:
    """Play every mission of ``dialogue``. ``seed`` is accepted for the common episode
    interface; MMTB's replay is deterministic given the model's answers."""
    del seed
    transcript: list[dict[str, Any]] = []
    records = []
    for mission in dialogue.missions:
        system = system_prompt(dialogue, mission, experiences)
        if not transcript:
            transcript.append({"role": "system", "content": system})
        records.append(_play_mission(dialogue, mission, complete, system, transcript))
    results = mission_results(records)
    correct = sum(r.correct for r in records)
    metrics = {k: v for k, v in breakdown(results).items() if v is not None}
    return EpisodeOutcome(task_id=dialogue.id, success=correct == len(records),
                          reward=correct / len(records) if records else 0.0,
                          metrics=metrics, missions=records, messages=transcript)


def mission_results(records: Sequence[MissionRecord]) -> list[MissionResult]:
    """Records → the judge's results (feed outcomes of many dialogues to ``breakdown``)."""
    return [MissionResult(r.kind, r.structure, r.correct, r.optimal) for r in records]


def render_trajectory(messages: Sequence[dict[str, Any]], max_chars: int = 4000) -> str:
    """Short text of a transcript: tool calls as ``name(args)``, long turns cut in the
    middle, the whole cut to ``max_chars`` keeping the end; the system prompt is left out."""
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
        if len(text) > 800:
            text = text[:500] + " […] " + text[-200:]
        lines.append(f"[{role}] {text}")
    return keep_end("\n".join(lines), max_chars)
