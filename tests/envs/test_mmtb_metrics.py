"""MMTB scoring (call graph, arguments, figures) and data reading, hand-computed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mmtb.data import GoldNode, load_dialogues, select, strip_role
from edv_ray.envs.mmtb.arguments import (
    Unscorable,
    check_arguments,
    rouge_l_f,
    score_call,
    score_value,
)
from edv_ray.envs.mmtb.callgraph import CallGraph, Crash
from edv_ray.envs.mmtb.metrics import MissionResult, answer_structure, breakdown

FILE = Path(__file__).resolve().parents[1] / "fixtures" / "mmtb" / "Multi-Mission-Tool-Bench.jsonl"


@pytest.fixture(scope="module")
def dialogues():
    return load_dialogues(FILE.parent)


def hotel(tools):
    return next(t for t in tools if t["function"]["name"] == "book_hotel")


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
    props = hotel(dialogues[0].tools)["function"]["parameters"]["properties"]
    assert score_value("new york", "New York", props["city"]) == 1.0
    assert score_value("NewYork", "New York", props["city"]) == 1.0
    # jieba keeps the spaces: [New, ' ', York, ' ', City] vs [New, ' ', York] → 2·(3/3·3/5)/(1+3/5)
    assert score_value("New York City", "New York", props["city"]) == pytest.approx(0.75)
    assert score_value("best pizza Naples", "best pizza Rome", props["city"]) == pytest.approx(0.8)
    assert score_value(2.0, 2, props["nights"]) == 1.0  # ints compared as floats
    assert score_value("2", 2, props["nights"]) == 0.0  # type mismatch
    assert score_value(3, 2, props["nights"]) == 0.0
    assert score_value("48.85,2.35", "48.86,2.29", {"type": "string"}) == 1.0
    arr = {"type": "array", "items": {"type": "string"}}
    assert score_value(["b", "a"], ["a", "b"], arr) == 1.0
    assert score_value(["a"], ["a", "b"], arr) == 0.0
    # sorted by ASCII-escaped JSON: "\u00e9lan" sorts before "zed"
    assert score_value(["élan", "zed"], ["zed", "aaa"], arr) == 0.5
    obj = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    # [q] vs [q, ' ', r]: lcs 1 → P 1/3, R 1 → 0.5
    assert score_value({"x": 1, "y": "q"}, {"x": 1, "y": "q r"}, obj) == pytest.approx(0.75)
    assert score_value({"z": 1}, {"x": 1}, obj) == 0.0  # hallucinated key
    # jieba words: 北京市 is one token, 北京 another
    assert rouge_l_f("北京市天气", "北京天气") == pytest.approx(0.5)
    assert rouge_l_f("北京 天气", "北京的天气") == pytest.approx(2 / 3)


def test_values_the_official_check_cannot_score():
    string = {"type": "string"}
    with pytest.raises(Unscorable):  # numbers under a string schema
        score_value(3, 2, string)
    assert score_value(3, 2, string, strict=False) == 0.0
    with pytest.raises(Unscorable):
        score_value("a", "b", {"type": "object"})
    with pytest.raises(Unscorable):
        score_value("a", "b", {"description": "no type"})
    assert score_value("a", "a", {"description": "no type"}) == 1.0  # equal before the schema


def test_call_scores(dialogues):
    tool = hotel(dialogues[0].tools)
    gold = {"city": "Madrid", "checkin": "2024-05-12", "nights": 2}
    assert score_call(dict(gold), gold, tool) == 1.0
    assert score_call({"city": "Madrid"}, gold, tool) == 0.0  # required checkin missing
    # hallucinated parameter: [1, 1, 1, 0] → 0.75 (still passes 0.7)
    assert score_call({**gold, "pool": True}, gold, tool) == pytest.approx(0.75)
    # type mismatch on nights: [1, 1, 0] → 2/3 < 0.7
    assert score_call({**gold, "nights": "2"}, gold, tool) == pytest.approx(2 / 3)
    # value absent from gold but named in the description → 1
    assert score_call({**gold, "room_type": "deluxe"}, gold, tool) == 1.0
    assert score_call({**gold, "room_type": "penthouse"}, gold, tool) == pytest.approx(0.75)
    empty = {"function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    assert score_call({}, {}, empty) == 1.0
    with pytest.raises(Unscorable):  # the official divides by zero
        score_call({}, {"city": "x"}, empty)
    assert score_call({}, {"city": "x"}, empty, strict=False) == 0.0


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
    # the clarification made through a (not offered) tool: the names differ → wrong
    ask = {"name": "ask_user_for_required_parameters", "arguments": {}}
    assert not check_arguments(calls + [ask], nodes, tools)[0]


def test_graph_parallel_any_order_and_serial_dependencies(dialogues):
    mission = dialogues[0].missions[1]
    graph = CallGraph(mission.nodes)
    assert graph.min_turns == 3
    assert graph.accept_calls(["book_hotel"]) is None  # depends on both weather calls
    assert graph.accept_text() is None  # a call is due
    got = graph.accept_calls(["get_exchange_rate", "get_weather", "get_weather"])
    assert [n.idx for n in got] == [2, 0, 1]  # sorted by name, then list order
    assert [n.idx for n in graph.accept_calls(["book_hotel"])] == [3]
    assert graph.accept_text().name == "prepare_to_answer"
    assert graph.turns == 3 and graph.optimal()


def test_same_name_run_whole_or_serialized_in_list_order():
    nodes = [GoldNode(i, "f", {"k": i}, None, ()) for i in range(3)] + \
            [GoldNode(3, "prepare_to_answer", {}, "", (0, 1, 2))]
    assert CallGraph(nodes).accept_calls(["f", "f"]) is None  # 2 of a run of 3
    g = CallGraph(nodes)
    for k in range(3):  # one at a time: the run serialized, nodes taken in list order
        assert [n.idx for n in g.accept_calls(["f"])] == [k]
    assert g.accept_text().idx == 3 and g.turns == 4 and g.min_turns == 2
    # not next to each other in the ready list: any two of them may go together
    apart = [GoldNode(0, "f", {}, None, ()), GoldNode(1, "g", {}, None, ()),
             GoldNode(2, "f", {}, None, ()), GoldNode(3, "f", {}, None, ()),
             GoldNode(4, "prepare_to_answer", {}, "", (0, 1, 2, 3))]
    g = CallGraph(apart)
    assert [n.idx for n in g.accept_calls(["f", "f"])] == [0, 2]
    assert [n.idx for n in g.accept_calls(["g", "f"])] == [3, 1]


def test_official_crashes_and_the_corrected_walk():
    nodes = [GoldNode(0, "f", {}, None, ()), GoldNode(1, "prepare_to_answer", {}, "", (0,))]
    g = CallGraph(nodes)
    g.accept_calls(["f"])
    assert g.accept_calls(["prepare_to_answer"])  # names match: accepted as a call
    with pytest.raises(Crash):  # the official loop indexes past its last step
        g.accept_text()
    g = CallGraph(nodes, "corrected")
    g.accept_calls(["f"]), g.accept_calls(["prepare_to_answer"])
    assert g.accept_text() is None
    # a clarification independent of a chain: the official shortest path batches it
    chain = [GoldNode(0, "a", {}, None, ()), GoldNode(1, "c", {}, None, (0,)),
             GoldNode(2, "ask_user_for_required_parameters", {}, "", (), "at 5"),
             GoldNode(3, "b", {}, None, (2,)), GoldNode(4, "prepare_to_answer", {}, "", (1, 3))]
    assert CallGraph(chain).min_turns == 3 and CallGraph(chain, "corrected").min_turns == 4
    with pytest.raises(ValueError, match="official"):
        CallGraph(chain, "lenient")


def test_answer_structures(dialogues):
    (d1, d2) = dialogues
    assert answer_structure(d1.missions[0].nodes) is None
    assert answer_structure(d1.missions[1].nodes) == "serial_parallel"
    assert answer_structure(d1.missions[2].nodes) is None  # ask + one call
    assert answer_structure(d1.missions[3].nodes) is None
    assert answer_structure(d2.missions[0].nodes) == "parallel"
    assert answer_structure(d2.missions[1].nodes) == "serial"


def test_breakdown_hand_computed():
    rs = [MissionResult("single", None, True), MissionResult("single", "parallel", True, True),
          MissionResult("chat", None, True), MissionResult("clarify", "serial_parallel", False),
          MissionResult("multi", "serial", True, True), MissionResult("multi", "parallel", False),
          MissionResult("multi", "serial_parallel", True, False),
          MissionResult("multi", "parallel", True, True, recorded=False)]
    b = breakdown(rs)
    assert b["overall"] == pytest.approx(5 / 7) and b["n_dropped"] == 1.0
    assert b["single"] == 1.0 and b["chat"] == 1.0 and b["clarify"] == 0.0
    assert b["multi"] == pytest.approx(2 / 3) and b["n_multi"] == 3.0
    # structures over every kind: the 单 mission is parallel, the 反 one serial+parallel
    assert (b["serial"], b["parallel"], b["serial_parallel"]) == (1.0, 0.5, 0.5)
    # optimal: of the 4 parallel / serial+parallel missions, 1 is correct AND optimal
    assert b["optimal_path"] == 0.25 and b["n_optimal_path"] == 4.0
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
