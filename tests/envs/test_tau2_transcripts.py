"""τ²-bench transcripts for the judging roles: every tool result and message whole, the
user's own tool traffic (telecom) left out, and the evidence rule of prompts.budget
(longest first, final state whole, a visible marker, figures recorded) when a prompt
must shrink. Tool outputs come from the real τ²-bench environments."""

from __future__ import annotations

import json

import pytest

from edv_ray.envs.tau2.env import render_transcript
from edv_ray.envs.tau2.tasks import domain_state
from edv_ray.prompts.budget import (
    count_tokens,
    elide_middle,
    final_state_chars,
    fit_prompt,
    shrink_parts,
)
from edv_ray.testing.helpers import tau2_tasks


def _tool_result(domain: str, name: str, arguments: dict, requestor: str = "assistant") -> dict:
    from tau2.data_model.message import ToolCall

    env = domain_state(domain).fresh_env()
    msg = env.get_response(ToolCall(id="c1", name=name, arguments=arguments, requestor=requestor))
    return msg.model_dump(mode="json")


def _call(role: str, name: str, arguments: dict, requestor: str) -> dict:
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage

    cls = UserMessage if role == "user" else AssistantMessage
    tc = ToolCall(id="c1", name=name, arguments=arguments, requestor=requestor)
    return cls(role=role, content=None, tool_calls=[tc]).model_dump(mode="json")


def _text(role: str, text: str) -> dict:
    return {"role": role, "content": text}


def airline_run() -> tuple[list[dict], str]:
    """A gold-path airline exchange: get_user_details of task 27's user (payment methods
    with travel certificates), as stored episode messages."""
    task = next(t for t in tau2_tasks("airline") if t.id == "27")
    action = task.evaluation_criteria.actions[0]
    assert action.name == "get_user_details"
    result = _tool_result("airline", action.name, dict(action.arguments))
    messages = [_text("user", "Hi, I need help with my request."),
                _call("assistant", action.name, dict(action.arguments), "assistant"), result,
                _text("assistant", "I found your profile."), _text("user", "Thanks. ###STOP###")]
    return messages, result["content"]


def test_tool_results_and_messages_are_whole():
    messages, details = airline_run()
    assert len(details) > 600 and "certificate_" in details  # the old cut was 300 chars
    long_reply = "Here is everything: " + "x" * 2000
    messages.insert(3, _text("assistant", long_reply))  # the old cut was 600 chars
    text = render_transcript(messages, 10**9)
    assert f"tool result: {details}" in text
    assert all(pm in text for pm in json.loads(details)["payment_methods"])
    assert long_reply in text


def test_user_side_tool_traffic_is_left_out():
    """Telecom in conversation mode: the user checks the phone with its own tools; the
    agent never sees the call or its output, so the transcript has neither."""
    status = _tool_result("telecom", "check_status_bar", {}, requestor="user")
    assert status["requestor"] == "user" and status["content"]
    lookup = _tool_result("telecom", "get_customer_by_phone", {"phone_number": "555-123-2002"})
    messages = [_text("user", "My phone has no data."),
                _call("assistant", "get_customer_by_phone", {"phone_number": "555-123-2002"},
                      "assistant"), lookup,
                _text("assistant", "Please check your status bar."),
                _call("user", "check_status_bar", {}, "user"), status,
                _text("user", "It says 5G, data enabled."),
                _text("assistant", "Thanks, all good then.")]
    text = render_transcript(messages, 10**9)
    assert status["content"] not in text and "check_status_bar" not in text
    assert lookup["content"] in text  # the agent's own tool output stays, whole
    assert "It says 5G, data enabled." in text  # what the user told the agent stays


def _transcript(n_results: int, size: int, last: str = "FINAL-RESULT") -> str:
    lines = ["user: please change my booking"]
    for i in range(n_results):
        lines += [f'assistant calls get_reservation_details({{"id": "R{i}"}})',
                  f"tool result: {'r' * size}"]
    lines += ['assistant calls update_reservation({"id": "R9"})', f"tool result: {last}",
              "assistant: done", "user: ###STOP###"]
    return "\n".join(lines)


def _without_marker(text: str) -> int:
    """Characters of ``text`` other than its elision marker line (and the break it adds)."""
    marker = [ln for ln in text.split("\n") if ln.startswith("[… ") and ln.endswith("elided …]")]
    assert len(marker) == 1, text[:300]
    return len(text) - len(marker[0]) - 2


def test_evidence_rule_keeps_head_and_final_state_and_marks_the_cut():
    text = _transcript(20, 400)
    final = final_state_chars(text)
    assert text.endswith(text[-final:]) and text[-final:].startswith("assistant calls update")
    out, kept = elide_middle(text, 2000)
    assert out.startswith("user: please change my booking")
    assert out.endswith(text[-final:])  # the last call, its result and the close, whole
    assert kept == _without_marker(out)
    assert len(text) > len(out) >= 1900


def test_longest_transcripts_are_shortened_first():
    long, short = _transcript(30, 400), _transcript(2, 100)
    parts, ev = shrink_parts([long, short], len(short) + 3000)
    assert parts[1] == short and parts[0] != long  # the short one stays whole
    assert ev.chars == len(long) + len(short) and ev.final_kept
    assert ev.kept == len(short) + _without_marker(parts[0])
    # even final states that cannot fit: their ends are kept, and the record says so
    parts, ev = shrink_parts([long, short], 40)
    assert not ev.final_kept and all(p.endswith("user: ###STOP###") for p in parts)


def test_fit_prompt_whole_when_it_fits_and_within_the_context_when_not():
    def render(ps):
        return "Judge these runs.\n" + "\n".join(f"<run>{p}</run>" for p in ps)

    parts = [_transcript(30, 400), _transcript(5, 400)]
    whole = fit_prompt(render, parts, n_ctx=65536, answer_tokens=4096, who="judge")
    assert whole == render(parts) and whole.evidence.share == 1.0
    small = fit_prompt(render, parts, n_ctx=3000, answer_tokens=512, who="judge")
    assert count_tokens(small) <= 3000 - 512 - 64
    assert 0 < small.evidence.share < 1 and small.evidence.final_kept
    assert all(p[-final_state_chars(p):] in small for p in parts)


def test_a_policy_that_cannot_fit_is_an_error_naming_the_sizes():
    from edv_ray.prompts.budget import PromptBudgetError

    with pytest.raises(PromptBudgetError, match="n_ctx=1000"):
        fit_prompt(lambda ps: "policy " * 2000, ["x"], n_ctx=1000, answer_tokens=100, who="judge")
