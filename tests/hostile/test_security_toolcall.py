"""A hostile text answer is a malformed tool call, read in bounded work (issue 28 D9).

The text tool-call parser caught only JSONDecodeError: arguments nested 1,000 deep raised
RecursionError (the episode became an infrastructure error), and 300 KB of ``{`` took
41 s (400 KB: 386 s) — every ``{`` re-parsed the rest of the text. Now the search is
bounded (``agents/toolcall_json.py``: the head of the text, the decoder's total work,
nesting ≤ 64) and such an answer is an agent failure the benchmark grades."""

from __future__ import annotations

import threading
import time

import pytest

from edv_ray.agents.strategies import get_strategy, parse_native_turn, parse_text_turn
from edv_ray.cli import main
from edv_ray.results.views import connect
from tests.hostile.security_kit import mock_config, write_yaml

TEXT = get_strategy("text_tools")


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


DEEP_CALL = '{"name": "create_task", "arguments": ' + _nested(1000) + "}"

HOSTILE = {
    "nested_1000": DEEP_CALL,
    "nested_1000_in_block": f"<tool_call>{DEEP_CALL}</tool_call>",
    "nested_1000_unclosed": '{"name": "f", "arguments": ' + '{"a": ' * 1000,
    "nested_70": '{"name": "f", "arguments": ' + _nested(70) + "}",  # past the bound of 64
    "braces_400k": "{" * 400_000,
    "key_braces_400k": '{"' * 200_000,
    "open_strings_400k": '{"a": "' * 57_000,
}


def _parse_within(fn, text: str, limit_s: float):
    """``fn(text)`` in a thread: (result or exception, seconds), or a failure past the
    limit (the old parser ran for minutes: the test must not)."""
    out: dict = {}

    def work():
        t0 = time.monotonic()
        try:
            out["value"] = fn(text)
        except BaseException as err:  # noqa: BLE001 - reported below
            out["value"] = err
        out["s"] = time.monotonic() - t0

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        pytest.fail(f"parsing {len(text)} characters ran past {limit_s} s")
    return out["value"], out["s"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_is_no_call_in_bounded_time(name):
    turn, _ = _parse_within(lambda t: parse_text_turn(t, TEXT), HOSTILE[name], 10.0)
    assert not isinstance(turn, BaseException), repr(turn)
    assert turn.tool_calls == []  # a malformed call: the model failed to act


def test_native_arguments_nested_1000_deep_are_no_call():
    calls = [{"id": "c1", "name": "create_task", "arguments": _nested(1000)}]
    turn, _ = _parse_within(lambda c: parse_native_turn("fallback", c), calls, 10.0)
    assert not isinstance(turn, BaseException), repr(turn)
    assert turn.tool_calls == [] and turn.text == "fallback"


def test_work_is_linear_in_the_text():
    """Structural bound: what the decoder reads is at most WORK_PER_CHAR per character
    (plus a constant), and only the first MAX_SCAN_CHARS characters are read."""
    from edv_ray.agents import toolcall_json as tj

    for text in ("{" * 400_000, '{"' * 200_000, '{"a": "' * 57_000, '{"a": [1,' * 40_000,
                 "{ " * 300_000 + '{"name": "f", "arguments": {}}'):
        stats = tj.ScanStats()
        list(tj.json_objects(text, stats))
        assert stats.work <= tj.WORK_PER_CHAR * stats.chars + 64 * tj.FIRST_WINDOW
    stats = tj.ScanStats()
    late = " " * tj.MAX_SCAN_CHARS + '{"name": "f", "arguments": {}}'
    assert list(tj.json_objects(late, stats)) == [] and stats.chars == tj.MAX_SCAN_CHARS


@pytest.mark.parametrize("text, name, args", [
    ('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', "f", {"x": 1}),
    ('I will call {"name": "f", "arguments": {"s": "}{"}} now', "f", {"s": "}{"}),
    ('text {broken {"name": "g", "arguments": {}}', "g", {}),
    ('{"name": "h", "arguments": {"a": {"b": 1}', "h", {"a": {"b": 1}}),  # repaired
    ('{"name": "h", "arguments": {"t": "' + "y" * 5000 + '"}}', "h", {"t": "y" * 5000}),
    ('{"name": "n", "arguments": ' + _nested(60) + "}", "n", None),  # within the bound
])
def test_good_calls_are_still_read(text, name, args):
    turn = parse_text_turn(text, TEXT)
    assert [c["name"] for c in turn.tool_calls] == [name]
    if args is not None:
        assert turn.tool_calls[0]["arguments"] == args


@pytest.mark.slow
def test_an_episode_answering_deep_json_is_an_agent_failure(server, tmp_path):
    """Through `edv run`: the agent's answer nested 1,000 deep ends the episode as a
    failure the benchmark graded (status ok, not success), not an error row."""
    server.add_script("agent", lambda req, tag: {"role": "assistant", "content": DEEP_CALL})
    path = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path))
    assert main(["run", "--no-progress", path]) == 0
    rows = connect(tmp_path / "runs" / "t").execute(
        "SELECT status, success FROM episodes").fetchall()
    assert rows and all(r == ("ok", False) for r in rows), rows
