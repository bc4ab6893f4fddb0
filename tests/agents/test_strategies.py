"""Text tool-call parsing for models without native tool calling."""

from __future__ import annotations

import os

import pytest

from edv_ray.agents.strategies import (
    get_strategy,
    parse_native_turn,
    parse_text_turn,
    render_system_prompt,
    text_history,
)

TEXT = get_strategy("text_tools")
PLAN = get_strategy("text_tools_plan")


def test_tool_call_block_is_parsed():
    turn = parse_text_turn('<tool_call>\n{"name": "get_user", "arguments": {"id": "u1"}}\n</tool_call>', TEXT)
    assert turn.text is None and [(c["name"], c["arguments"]) for c in turn.tool_calls] == [
        ("get_user", {"id": "u1"})]


def test_unclosed_block_fenced_json_and_string_arguments():
    assert parse_text_turn('<tool_call>{"name": "a", "arguments": {}}', TEXT).tool_calls[0]["name"] == "a"
    fenced = 'Sure:\n```json\n{"name": "b", "arguments": "{\\"x\\": 1}"}\n```'
    assert parse_text_turn(fenced, TEXT).tool_calls[0]["arguments"] == {"x": 1}


def test_plain_text_and_broken_calls_stay_text():
    assert parse_text_turn("Hello, how can I help?", TEXT).text == "Hello, how can I help?"
    broken = parse_text_turn('<tool_call>{"name": "x", "arguments": {oops}</tool_call>', TEXT)
    assert broken.tool_calls == [] and broken.text is None  # nothing usable, nothing invented
    assert parse_text_turn('{"foo": 1}', TEXT).tool_calls == []


def test_bare_calls_inside_text_and_a_missing_final_brace():
    seen = parse_text_turn('Tool response:\n{"name": "create_task", "arguments": {"user_id": "u"}}', TEXT)
    assert seen.tool_calls[0]["arguments"] == {"user_id": "u"}
    cut = parse_text_turn('{"name": "done", "arguments": {"note": "x"}', TEXT)
    assert cut.tool_calls[0]["name"] == "done"
    two = parse_text_turn('<tool_call>{"name": "a", "arguments": {}}</tool_call>'
                          '<tool_call>{"name": "b", "arguments": {}}</tool_call>', TEXT)
    assert [c["name"] for c in two.tool_calls] == ["a", "b"]


def test_plan_line_is_not_shown_to_the_customer():
    turn = parse_text_turn("Plan: ask for the order id\nCould you share your order id?", PLAN)
    assert turn.text == "Could you share your order id?"


def test_native_calls_with_bad_arguments_fall_back_to_text():
    bad = parse_native_turn("fallback", [{"id": "1", "name": "f", "arguments": "{not json"}])
    assert bad.tool_calls == [] and bad.text == "fallback"
    good = parse_native_turn(None, [{"id": "1", "name": "f", "arguments": '{"a": 2}'}])
    assert good.tool_calls[0]["arguments"] == {"a": 2}


def test_history_and_prompt_rendering():
    hist = text_history([
        {"role": "system", "content": "S"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "content": "r1", "tool_call_id": "1"},
        {"role": "tool", "content": "r2", "tool_call_id": "2"},
    ])
    assert [m["role"] for m in hist] == ["system", "assistant", "user"]
    assert '"name": "f"' in hist[1]["content"] and hist[2]["content"].count("<tool_response>") == 2
    prompt = render_system_prompt(TEXT, "POLICY", [{"type": "function", "function": {"name": "f"}}],
                                  ["Check the id first."], ticket="T-1")
    assert "POLICY" in prompt and '"name": "f"' in prompt and "T-1" in prompt
    assert "1. Check the id first." in prompt and "$" not in prompt


@pytest.mark.parametrize("name", ["native_tools", "text_tools", "text_tools_plan"])
def test_system_prompt_is_prefix_cache_friendly(name):
    """Policy and tools first (shared by every task), then experiences, then the ticket."""
    strategy = get_strategy(name)
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    a = render_system_prompt(strategy, "POLICY-TEXT", tools, ["Lesson A."], ticket="TICKET-1")
    b = render_system_prompt(strategy, "POLICY-TEXT", tools, ["Lesson B."], ticket="TICKET-2")
    plain = render_system_prompt(strategy, "POLICY-TEXT", tools, [], ticket="TICKET-3")
    shared = len(os.path.commonprefix([a, b, plain]))
    assert a.index("POLICY-TEXT") < shared and a.index("</policy>") < shared
    if not strategy.native_tools:
        assert a.index('"name": "lookup"') < shared
    assert a.index("POLICY-TEXT") < a.index("Lesson A.") < a.index("TICKET-1")
    assert plain.rstrip().endswith("</ticket>")


def test_thinking_models_get_their_reasoning_back():
    from tau2.data_model.message import AssistantMessage, SystemMessage, UserMessage

    from edv_ray.envs.tau2.agent import with_reasoning

    msgs = [SystemMessage(role="system", content="policy"),
            UserMessage(role="user", content="hi"),
            AssistantMessage(role="assistant", content="hello",
                             raw_data={"reasoning_content": "the user greets me"}),
            UserMessage(role="user", content="book it"),
            AssistantMessage(role="assistant", content="done")]
    out = with_reasoning(msgs)
    assert out[2]["reasoning_content"] == "the user greets me"
    assert "reasoning_content" not in out[4] and "reasoning_content" not in out[1]
