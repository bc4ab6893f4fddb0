"""MMTB scoring (call graph, arguments, breakdown) and data reading, hand-computed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mmtb.data import GoldNode, load_dialogues, select, strip_role
from edv_ray.envs.mmtb.metrics import (
    MissionJudge,
    MissionResult,
    answer_structure,
    breakdown,
    check_arguments,
    rouge_l_f,
    score_call,
    score_value,
    tool_schema,
)

FILE = Path(__file__).resolve().parents[1] / "fixtures" / "mmtb" / "Multi-Mission-Tool-Bench.jsonl"


@pytest.fixture(scope="module")
def dialogues():
    return load_dialogues(FILE.parent)


def hotel(tools):
    return tool_schema(tools, "book_hotel")


def test_fixture_reads_as_typed_records(dialogues):
    d1, d2 = dialogues
    assert [m.type for m in d1.missions] == ["单", "多", "反", "拒"]
    assert [m.kind for m in d1.missions] == ["single", "multi", "clarify", "chat"]
    assert d1.missions[0].env_info == "当前时间：2024-05-10 10:00:00"
    assert d2.missions[1].env_info == "当前时间：2024-05-10 11:05:00"
    assert d1.missions[2].segment[2] == {"role": "user", "content": "From Shanghai, on 2024-06-01."}
    assert d1.missions[2].nodes[0].user_input == "From Shanghai, on 2024-06-01."
    assert d1.turn_type == (False, True, True, True)
    assert strip_role("AI Agent: hi", True) == "hi" and strip_role("Note: x", True) == "Note: x"
    assert strip_role("用户：你好", False) == "你好"
    assert [d.id for d in select(dialogues, "all")] == ["mmtb-1", "mmtb-2"]
    train, test = select(dialogues, "train"), select(dialogues, "test")
    assert len(train) + len(test) == 2 and not {d.id for d in train} & {d.id for d in test}
    assert select(dialogues, "train", train_fraction=1.0) == dialogues


def test_value_scores(dialogues):
    props = hotel(dialogues[0].tools)["properties"]
    assert score_value("new york", "New York", props["city"]) == 1.0
    assert score_value("NewYork", "New York", props["city"]) == 1.0
    # ROUGE-L: lcs 2, P = 2/3, R = 1 → 0.8
    assert score_value("New York City", "New York", props["city"]) == pytest.approx(0.8)
    assert score_value(2.0, 2, props["nights"]) == 1.0  # ints compared as floats
    assert score_value("2", 2, props["nights"]) == 0.0  # type mismatch
    assert score_value(3, 2, props["nights"]) == 0.0
    assert score_value("48.85,2.35", "48.86,2.29", {"type": "string"}) == 1.0
    arr = {"type": "array", "items": {"type": "string"}}
    assert score_value(["b", "a"], ["a", "b"], arr) == 1.0
    assert score_value(["a"], ["a", "b"], arr) == 0.0
    obj = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    assert score_value({"x": 1, "y": "q"}, {"x": 1, "y": "q r"}, obj) == pytest.approx((1 + 2 / 3) / 2)
    assert score_value({"z": 1}, {"x": 1}, obj) == 0.0  # hallucinated key
    assert rouge_l_f("北京 天气", "北京的天气") == pytest.approx(2 * (4 / 4) * (4 / 5) / (4 / 4 + 4 / 5))


def test_call_scores(dialogues):
    params = hotel(dialogues[0].tools)
    gold = {"city": "Madrid", "checkin": "2024-05-12", "nights": 2}
    assert score_call(dict(gold), gold, params) == 1.0
    assert score_call({"city": "Madrid"}, gold, params) == 0.0  # required checkin missing
    # hallucinated parameter: [1, 1, 1, 0] → 0.75 (still passes 0.7)
    assert score_call({**gold, "pool": True}, gold, params) == pytest.approx(0.75)
    # type mismatch on nights: [1, 1, 0] → 2/3 < 0.7
    assert score_call({**gold, "nights": "2"}, gold, params) == pytest.approx(2 / 3)
    # value absent from gold but named in the description → 1
    assert score_call({**gold, "room_type": "deluxe"}, gold, params) == 1.0
    assert score_call({**gold, "room_type": "penthouse"}, gold, params) == pytest.approx(0.75)
    assert score_call({}, {}, {}) == 1.0


def test_check_arguments_pairs_by_best_match(dialogues):
    nodes = dialogues[0].missions[1].nodes
    tools = dialogues[0].tools
    calls = [{"name": "get_weather", "arguments": {"city": "Madrid"}},
             {"name": "get_exchange_rate", "arguments": {"from_currency": "USD", "to_currency": "EUR"}},
             {"name": "get_weather", "arguments": {"city": "Rome"}},
             {"name": "book_hotel", "arguments": {"city": "Madrid", "checkin": "2024-05-12", "nights": 2}}]
    ok, scores = check_arguments(calls, nodes, tools)
    assert ok and scores == [1.0, 1.0, 1.0, 1.0]
    bad = calls[:3] + [{"name": "book_hotel",
                        "arguments": {"city": "Madrid", "checkin": "2024-05-12", "nights": "2"}}]
    ok, scores = check_arguments(bad, nodes, tools)
    assert not ok and scores[3] == pytest.approx(2 / 3)
    ok, _ = check_arguments(calls[:3], nodes, tools)  # a call missing: counts differ
    assert not ok


def test_judge_parallel_any_order_and_serial_dependencies(dialogues):
    mission = dialogues[0].missions[1]
    judge = MissionJudge(mission.nodes, dialogues[0].tools)
    assert judge.min_turns() == 3
    hotel_call = {"name": "book_hotel", "arguments": {"city": "Madrid", "checkin": "2024-05-12"}}
    assert judge.accept_calls([hotel_call]) is None  # depends on both weather calls
    assert judge.accept_text() is None  # a call is due
    got = judge.accept_calls([
        {"name": "get_exchange_rate", "arguments": {"from_currency": "USD", "to_currency": "EUR"}},
        {"name": "get_weather", "arguments": {"city": "Madrid"}},
        {"name": "get_weather", "arguments": {"city": "Rome"}}])
    assert [n.idx for n in got] == [2, 1, 0]  # same-name calls paired by their arguments
    assert [n.idx for n in judge.accept_calls([hotel_call])] == [3]
    assert judge.accept_text().name == "prepare_to_answer" and judge.finished
    assert judge.turns == 3


def test_judge_same_name_all_or_one():
    nodes = [GoldNode(i, "f", {"k": i}, None, ()) for i in range(3)] + \
            [GoldNode(3, "prepare_to_answer", {}, "", (0, 1, 2))]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"k": {"type": "integer"}}}}}]
    two = [{"name": "f", "arguments": {"k": 0}}, {"name": "f", "arguments": {"k": 1}}]
    assert MissionJudge(nodes, tools).accept_calls(two) is None  # 2 of 3: neither all nor one
    j = MissionJudge(nodes, tools)
    for k in (2, 0, 1):  # serialized one at a time, any order
        assert [n.idx for n in j.accept_calls([{"name": "f", "arguments": {"k": k}}])] == [k]
    assert j.accept_text().idx == 3 and j.turns == 4 and j.min_turns() == 2


def test_answer_structures(dialogues):
    (d1, d2) = dialogues
    assert answer_structure(d1.missions[0].nodes) is None
    assert answer_structure(d1.missions[1].nodes) == "serial_parallel"
    assert answer_structure(d1.missions[2].nodes) is None  # ask + one call
    assert answer_structure(d1.missions[3].nodes) is None
    assert answer_structure(d2.missions[0].nodes) == "parallel"
    assert answer_structure(d2.missions[1].nodes) == "serial"


def test_breakdown_hand_computed():
    rs = [MissionResult("single", None, True), MissionResult("single", None, False),
          MissionResult("chat", None, True), MissionResult("clarify", None, False),
          MissionResult("multi", "serial", True, True), MissionResult("multi", "parallel", False),
          MissionResult("multi", "serial_parallel", True, False)]
    b = breakdown(rs)
    assert b["overall"] == pytest.approx(4 / 7)
    assert b["single"] == 0.5 and b["chat"] == 1.0 and b["clarify"] == 0.0
    assert b["multi"] == pytest.approx(2 / 3)
    assert (b["serial_multi"], b["parallel_multi"], b["serial_parallel_multi"]) == (1.0, 0.0, 1.0)
    assert b["optimal_rate_multi"] == 0.5 and b["n_multi"] == 3.0
    assert breakdown([])["overall"] is None


def test_bad_data_errors_name_the_file(tmp_path):
    with pytest.raises(BenchmarkDataError) as err:
        load_dialogues(tmp_path)
    assert "Multi-Mission-Tool-Bench.jsonl" in str(err.value)
    f = tmp_path / "Multi-Mission-Tool-Bench.jsonl"
    f.write_text("{oops\n")
    with pytest.raises(BenchmarkDataError, match=r"Multi-Mission-Tool-Bench.jsonl:1"):
        load_dialogues(f)
    f.write_text(json.dumps({"id": "x", "english_task": ["a"]}) + "\n")
    with pytest.raises(BenchmarkDataError) as err:
        load_dialogues(f)
    assert "english_answer_list" in str(err.value) and "task_ids" in str(err.value)
    entry = json.loads(FILE.read_text().splitlines()[0])
    entry["english_messages"] = entry["english_messages"][:2]  # one segment for 4 missions
    f.write_text(json.dumps(entry, ensure_ascii=False) + "\n")
    with pytest.raises(BenchmarkDataError, match="1 message segments"):
        load_dialogues(f)
