"""A server's token usage is checked, not believed (issue 28 D8).

A usage of 10³⁰ raised OverflowError when the call rows were written (the episode became
an infrastructure error and its call rows were lost); negative counts were stored and
shrank the cost tables. Now a count that is not a whole number in [0, 2³¹) is unknown:
null on the call row with ``usage_invalid`` set, left out of the sums and counted in
``usage_unknown`` — and the call row is kept. Through the real client path: the scripted
OpenAI-compatible server sends the usage."""

from __future__ import annotations

import pytest

from edv_ray.cli import main
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.results.store import RunStore
from edv_ray.results.views import connect
from edv_ray.testing.scripted_server import ScriptedServer
from tests.hostile.security_kit import mock_config, write_yaml

HUGE = 10**30
CTX = CallContext(run_id="r", stage="eval", role="tester", agent="a", domain="mock",
                  task_id="t1", trial=0, episode_id="e1")

# usage sent → (prompt tokens, completion tokens) stored; None = unknown
USAGES = {
    "huge": ({"prompt_tokens": HUGE, "completion_tokens": 5}, (None, 5)),
    "negative": ({"prompt_tokens": -7, "completion_tokens": -1}, (None, None)),
    "bool_and_fraction": ({"prompt_tokens": True, "completion_tokens": 2.5}, (None, None)),
    "text_and_null": ({"prompt_tokens": "many", "completion_tokens": None}, (None, None)),
    "missing": ({}, (None, None)),
    "past_int32": ({"prompt_tokens": 2**31, "completion_tokens": 1}, (None, 1)),
}
LITELLM = ("huge", "negative", "past_int32")  # litellm itself refuses the other shapes


@pytest.fixture
def srv():
    server = ScriptedServer().start()
    yield server
    server.stop()


def _one_call(server, usage, transport: str) -> dict:
    server.usage = usage
    ledger = CallLedger()
    LLMClient(timeout_s=10, max_retries=0, transport=transport).complete(
        Endpoint("scripted", "openai/scripted", server.base_url),
        [{"role": "user", "content": "hi"}], ctx=CTX, ledger=ledger)
    [row] = ledger.rows()
    return row


@pytest.mark.parametrize("transport, name", [("openai_sdk", n) for n in USAGES]
                         + [("litellm", n) for n in LITELLM])
def test_invalid_usage_is_unknown_and_the_row_is_kept(srv, tmp_path, transport, name):
    usage, (pt, ct) = USAGES[name]
    row = _one_call(srv, usage, transport)
    assert (row["prompt_tokens"], row["completion_tokens"], row["ok"]) == (pt, ct, True)
    assert row.get("usage_invalid") is True
    good = _one_call(srv, {"prompt_tokens": 12, "completion_tokens": 3}, transport)
    assert (good["prompt_tokens"], good["completion_tokens"], good["usage_invalid"]) == (12, 3, False)
    # both rows are written and read back: the bad one counted apart, not as 0 or < 0
    store = RunStore(tmp_path / "run")
    episode = {"run_id": "r", "episode_id": "e1", "attempt": 0, "status": "ok", "trial": 0,
               "epoch": 0, "agent": "a", "task_id": "t1", "domain": "mock"}
    store.write_episode("eval", episode, [row, good])
    calls, p, c, unknown = connect(tmp_path / "run").execute(
        "SELECT calls, prompt_tokens, completion_tokens, usage_unknown "
        "FROM tokens_by_stage").fetchone()
    assert (calls, unknown) == (2, 1)
    assert (p, c) == (12 + (pt or 0), 3 + (ct or 0))


def test_a_run_whose_server_lies_about_usage_keeps_its_calls(server, tmp_path):
    """Through `edv run`: every answer claims 10³⁰ prompt tokens and a negative
    completion count; the episodes are graded (no error rows), every call row is kept
    with unknown tokens, and the token table says how many."""
    server.usage = {"prompt_tokens": HUGE, "completion_tokens": -3}
    try:
        path = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path))
        assert main(["run", "--no-progress", path]) == 0
    finally:
        server.usage = None
    con = connect(tmp_path / "runs" / "t")
    assert con.execute("SELECT count(*) FILTER (WHERE status = 'error') FROM episodes"
                       ).fetchone()[0] == 0
    n, unknown, flagged, p, c = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE prompt_tokens IS NULL AND "
        "completion_tokens IS NULL), count(*) FILTER (WHERE usage_invalid), "
        "sum(prompt_tokens), sum(completion_tokens) FROM llm_calls").fetchone()
    assert n > 0 and unknown == flagged == n and (p, c) == (None, None)
    assert con.execute("SELECT sum(calls), sum(usage_unknown) FROM tokens_by_stage"
                       ).fetchone() == (n, n)
    assert con.execute("SELECT min(agent_prompt_tokens), min(agent_completion_tokens) "
                       "FROM episodes").fetchone() == (0, 0)  # never negative
