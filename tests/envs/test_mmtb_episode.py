"""MMTB episodes driven by scripted ``complete`` callables over the fixture dialogues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edv_ray.envs.mmtb.data import ASK, PREPARE, Mission, load_dialogues
from edv_ray.envs.mmtb.episode import (
    NO_RESULT,
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


def mission_model(dialogue, replies: dict[int, list[str]]):
    """A model that answers each mission from its own queue (found by the mission's task
    message in the request), then ""; requests kept in ``complete.seen``. Unlike one
    flat queue it stays aligned when a mission goes on after a rejected turn."""
    queues = {m.segment[m.task_id]["content"]: list(replies[m.index]) for m in dialogue.missions}
    seen = []

    def complete(chat):
        seen.append(chat)
        task = next(m["content"] for m in reversed(chat)
                    if m["role"] == "user" and m["content"] in queues)
        return queues[task].pop(0) if queues[task] else ""

    complete.seen = seen
    complete.queues = queues
    return complete


def gold_model(dialogue, replace=None):
    replace = replace or {}
    return mission_model(dialogue, {m.index: replace.get(m.index, gold_replies(m))
                                    for m in dialogue.missions})


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
    for key in ("overall", "single", "multi", "chat", "clarify", "serial_parallel"):
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
    out = run_episode(d1, gold_model(d1, {1: shuffled}))
    assert out.missions[1].correct and out.missions[1].optimal and out.success
    serial = [call("get_weather", city="Rome"), call("get_weather", city="Madrid"),
              "\n".join([hotel, call("get_exchange_rate", from_currency="USD", to_currency="EUR")]),
              final]
    out = run_episode(d1, gold_model(d1, {1: serial}))
    m = out.missions[1]
    assert m.correct and not m.optimal and (m.turns, m.min_turns) == (4, 3)
    assert out.metrics["optimal_path"] == 0.0 and out.reward == 1.0


def test_wrong_name_early_call_and_low_arguments(dialogues):
    d1, d2 = dialogues
    wrong = [call("get_flight", origin="Paris", destination="Paris", date="2024-05-11"),
             "Sunny, I believe."]
    out = run_episode(d1, gold_model(d1, {0: wrong}))
    assert out.missions[0].reason == "wrong_calls" and out.reward == pytest.approx(0.75)
    assert out.missions[0].extra_turns == 1  # the answer after the rejected call
    early = [call("convert_currency", amount=100, from_currency="USD", to_currency="EUR")]
    out = run_episode(d2, gold_model(d2, {1: early}))
    assert out.missions[1].reason == "wrong_calls"  # depends on the exchange rate
    low = gold_replies(d1.missions[1])
    low[1] = call("book_hotel", city="Madrid", checkin="2024-05-12", nights="2")
    out = run_episode(d1, gold_model(d1, {1: low}))
    m = out.missions[1]
    assert m.calls_correct and not m.arguments_correct and m.reason == "arguments"
    assert m.argument_scores[-1] == pytest.approx(2 / 3) and out.reward == pytest.approx(0.75)
    assert out.metrics["serial_parallel"] == 0.0


def test_a_rejected_mission_ends_like_an_accepted_one(dialogues):
    """The verdict is settled at the rejected call; the mission goes on off the record
    (calls answered with NO_RESULT) until the model answers, so the transcript a judge
    reads has the same shape whether the call was right or wrong."""
    d1 = dialogues[0]
    right = [call("get_weather", city="Paris", date="2024-05-11"), "Sunny tomorrow."]
    wrong = [call("get_flight", origin="Paris", destination="Rome", date="2024-05-11"),
             "Sunny tomorrow."]
    shapes = []
    for replies in (right, wrong):
        out = run_episode(d1, gold_model(d1, {0: replies}))
        first = render_trajectory(out.messages, 10**6).split("===== mission 2 =====")[0]
        shapes.append([line.split("]")[0] for line in first.splitlines() if line.startswith("[")])
        assert out.missions[0].correct == (replies is right)
    assert shapes[0] == shapes[1] == ["[user", "[assistant→tools", "[tool", "[assistant"]
    out = run_episode(d1, gold_model(d1, {0: wrong}))
    assert out.messages[4]["content"] == NO_RESULT and out.messages[5]["content"] == "Sunny tomorrow."


def test_tool_results_follow_the_official_order_or_each_call(dialogues):
    """Official: the step's results in the order of the gold tools' names, under the
    calls' ids in call order (a call can get another tool's result); corrected: each
    call gets its own node's result."""
    d1 = dialogues[0]
    m = d1.missions[1]
    turn = "\n".join([call("get_exchange_rate", from_currency="USD", to_currency="EUR"),
                      call("get_weather", city="Rome"), call("get_weather", city="Madrid")])
    replies = {1: [turn] + gold_replies(m)[1:]}
    results = {}
    for mode in ("official", "corrected"):
        out = run_episode(d1, gold_model(d1, replies), metrics=mode)
        results[mode] = [x["content"] for x in out.messages if x["role"] == "tool"][1:4]
        assert out.success and out.metrics_mode == mode
    rate, rome, madrid = (json.dumps(n.observation, ensure_ascii=False) for n in
                          (m.nodes[2], m.nodes[0], m.nodes[1]))
    assert results["official"] == [rate, rome, madrid]  # names sorted: exchange < weather
    assert results["corrected"] == [rate, rome, madrid]
    turn = "\n".join([call("get_weather", city="Madrid"), call("get_weather", city="Rome"),
                      call("get_exchange_rate", from_currency="USD", to_currency="EUR")])
    replies = {1: [turn] + gold_replies(m)[1:]}
    official = run_episode(d1, gold_model(d1, replies))
    corrected = run_episode(d1, gold_model(d1, replies), metrics="corrected")
    assert [x["content"] for x in official.messages if x["role"] == "tool"][1:4] == \
        [rate, rome, madrid]  # the Madrid weather call is given the exchange rate
    assert [x["content"] for x in corrected.messages if x["role"] == "tool"][1:4] == \
        [madrid, rome, rate]


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
    assert "===== mission 3 =====" in text and "get_weather(" in text
    assert "(clarify)" not in text and "(multi)" not in text  # no gold label
    marker, _, kept = render_trajectory(out.messages, 200).partition("\n")
    assert marker.endswith("chars elided …]") and len(kept) == 200 and text.endswith(kept)


def test_observed_text_task_type_breakdown(dialogues):
    d1, d2 = dialogues
    assert observed_text(d1) == "What's the weather in Paris tomorrow?"
    assert task_type(d1) == "chat+clarify+multi+single" and task_type(d2) == "multi"
    assert "Multi-Mission Tool Bench" in instructions()
    outs = [run_episode(d1, scripted(gold_for(d1))), run_episode(d2, lambda m: "")]
    b = breakdown([r for o in outs for r in mission_results(o.missions)])
    assert b["overall"] == pytest.approx(4 / 6) and b["multi"] == pytest.approx(1 / 3)
    assert (b["parallel"], b["serial"], b["serial_parallel"]) == (0.0, 0.0, 1.0)
