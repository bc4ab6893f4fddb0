"""MMTB episodes driven by scripted ``complete`` callables over the fixture dialogues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edv_ray.envs.mmtb.data import ASK, PREPARE, Mission, load_dialogues
from edv_ray.envs.mmtb.episode import (
    instructions,
    mission_results,
    observed_text,
    render_trajectory,
    run_episode,
    task_type,
)
from edv_ray.envs.mmtb.metrics import breakdown

FILE = Path(__file__).resolve().parents[1] / "fixtures" / "mmtb" / "Multi-Mission-Tool-Bench.jsonl"
ASK_TEXT = "Where do you fly from, and on which date?"


@pytest.fixture(scope="module")
def dialogues():
    return load_dialogues(FILE)


def call(name, **arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def gold_replies(mission: Mission) -> list[str]:
    """The fewest-turn gold play: every node of one dependency level per turn."""
    nodes = {n.idx: n for n in mission.nodes}
    level: dict[int, int] = {}

    def depth(i):
        if i not in level:
            level[i] = 1 + max((depth(d) for d in nodes[i].dependency_list), default=0)
        return level[i]

    replies = []
    for lv in sorted({depth(i) for i in nodes}):
        batch = [nodes[i] for i in sorted(nodes) if level[i] == lv]
        if any(n.name == ASK for n in batch):
            replies.append(ASK_TEXT)
        elif any(n.name == PREPARE for n in batch):
            replies.append(str(batch[0].observation))
        else:
            replies.append("\n".join(call(n.name, **n.arguments) for n in batch))
    return replies


def scripted(replies):
    queue, seen = list(replies), []

    def complete(messages):
        seen.append(messages)
        return queue.pop(0) if queue else ""

    complete.seen = seen
    complete.queue = queue
    return complete


def gold_for(dialogue, replace=None):
    replace = replace or {}
    out = []
    for m in dialogue.missions:
        out += replace.get(m.index, gold_replies(m))
    return out


def test_gold_play_scores_one_everywhere(dialogues):
    for d in dialogues:
        complete = scripted(gold_for(d))
        out = run_episode(d, complete)
        assert out.success and out.reward == 1.0 and not complete.queue
        assert all(r.correct and r.optimal and r.reason == "" for r in out.missions)
        assert {k: v for k, v in out.metrics.items() if not k.startswith("n_")} == \
            {k: 1.0 for k in out.metrics if not k.startswith("n_")}
    d1 = dialogues[0]
    out = run_episode(d1, scripted(gold_for(d1)))
    for key in ("overall", "single", "multi", "chat", "clarify", "serial_parallel_multi"):
        assert out.metrics[key] == 1.0
    assert [r.turns for r in out.missions] == [2, 3, 3, 1]


def test_do_nothing_scores_zero(dialogues):
    for d in dialogues:
        out = run_episode(d, lambda m: "")
        assert not out.success and out.reward == 0.0
        assert {r.reason for r in out.missions} == {"empty_reply"}


def test_text_only_gets_the_chat_mission_and_the_clarification_turn(dialogues):
    d1, d2 = dialogues
    complete = scripted(["Sure."] * 10)
    out = run_episode(d1, complete)
    assert out.reward == pytest.approx(0.25) and [r.correct for r in out.missions] == \
        [False, False, False, True]
    clarify = out.missions[2]
    assert clarify.turns == 1 and clarify.reason == "text_where_call_due"
    # after the accepted clarifying question the gold user reply follows
    assert complete.seen[3][-1] == {"role": "user", "content": "From Shanghai, on 2024-06-01."}
    assert run_episode(d2, lambda m: "Sure.").reward == 0.0


def test_parallel_calls_in_any_order_and_a_longer_valid_path(dialogues):
    d1 = dialogues[0]
    hotel = call("book_hotel", city="Madrid", checkin="2024-05-12", nights=2)
    final = gold_replies(d1.missions[1])[-1]
    shuffled = ["\n".join([call("get_weather", city="Madrid"),
                           call("get_exchange_rate", from_currency="USD", to_currency="EUR"),
                           call("get_weather", city="Rome")]), hotel, final]
    out = run_episode(d1, scripted(gold_for(d1, {1: shuffled})))
    assert out.missions[1].correct and out.missions[1].optimal and out.success
    serial = [call("get_weather", city="Rome"), call("get_weather", city="Madrid"),
              "\n".join([hotel, call("get_exchange_rate", from_currency="USD", to_currency="EUR")]),
              final]
    out = run_episode(d1, scripted(gold_for(d1, {1: serial})))
    m = out.missions[1]
    assert m.correct and not m.optimal and (m.turns, m.min_turns) == (4, 3)
    assert out.metrics["optimal_rate_multi"] == 0.0 and out.reward == 1.0


def test_wrong_name_early_call_and_low_arguments(dialogues):
    d1, d2 = dialogues
    wrong = [call("get_flight", origin="Paris", destination="Paris", date="2024-05-11")]
    out = run_episode(d1, scripted(gold_for(d1, {0: wrong})))
    assert out.missions[0].reason == "wrong_calls" and out.reward == pytest.approx(0.75)
    early = [call("convert_currency", amount=100, from_currency="USD", to_currency="EUR")]
    out = run_episode(d2, scripted(gold_for(d2, {1: early})))
    assert out.missions[1].reason == "wrong_calls"  # depends on the exchange rate
    low = gold_replies(d1.missions[1])
    low[1] = call("book_hotel", city="Madrid", checkin="2024-05-12", nights="2")
    out = run_episode(d1, scripted(gold_for(d1, {1: low})))
    m = out.missions[1]
    assert m.calls_correct and not m.arguments_correct and m.reason == "arguments"
    assert m.argument_scores[-1] == pytest.approx(2 / 3) and out.reward == pytest.approx(0.75)
    assert out.metrics["serial_parallel_multi"] == 0.0


def test_context_is_the_gold_dialogue_and_tool_results_are_gold(dialogues):
    d1 = dialogues[0]
    complete = scripted(gold_for(d1, {1: ["I will not."]}))
    out = run_episode(d1, complete, experiences=["Ask for the origin city before searching flights."])
    first_of_m3 = complete.seen[3]  # turns: m1 ×2, m2 ×1, then mission 3
    texts = [m["content"] for m in first_of_m3]
    assert "Booked 2 nights in Madrid (H-77)" in texts[-2]  # gold answer, not "I will not."
    assert "I will not." not in " ".join(texts)
    assert texts[-1] == "Book me a flight to Tokyo." and not any("User:" in t for t in texts)
    system = first_of_m3[0]["content"]
    assert "1. Ask for the origin city" in system and "2024-05-10 10:00:00" in system
    assert "星期" not in system and '"name": "get_flight"' in system
    # the weather result reaches the model as a gold <tool_response>
    after_call = complete.seen[1][-1]["content"]
    assert after_call.startswith("<tool_response>") and '"forecast": "sunny"' in after_call
    assert out.reward == pytest.approx(0.75)
    json.dumps(out.to_dict())
    text = render_trajectory(out.messages, 100000)
    assert "===== mission 3 (clarify) =====" in text and "get_weather(" in text
    assert len(render_trajectory(out.messages, 200)) <= 200


def test_observed_text_task_type_breakdown(dialogues):
    d1, d2 = dialogues
    assert observed_text(d1) == "What's the weather in Paris tomorrow?"
    assert task_type(d1) == "chat+clarify+multi+single" and task_type(d2) == "multi"
    assert "Multi-Mission Tool Bench" in instructions()
    outs = [run_episode(d1, scripted(gold_for(d1))), run_episode(d2, lambda m: "")]
    b = breakdown([r for o in outs for r in mission_results(o.missions)])
    assert b["overall"] == pytest.approx(4 / 6) and b["multi"] == pytest.approx(1 / 3)
    assert (b["parallel_multi"], b["serial_multi"], b["serial_parallel_multi"]) == (0.0, 0.0, 1.0)
