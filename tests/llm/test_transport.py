"""The two transports of a model call (``llm.transport``) against a real HTTP test double:
the same request reaches the server, the same Completion comes back, and the
OpenAI-SDK path keeps the client's retries, error classes and wall-clock bound."""

from __future__ import annotations

import time

import openai
import pytest

from litellm.integrations.custom_logger import CustomLogger

from edv_ray.config import LLMConfig, Sampling
from edv_ray.llm import aio
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMCallError, LLMClient
from edv_ray.llm.transport import is_openai_compatible, path_for, warm_up
from edv_ray.testing.scripted_server import ScriptedServer

CTX = CallContext(run_id="r", stage="test", role="tester", agent="a", domain="d",
                  task_id="t1", trial=2, episode_id="e1")
MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "find a booking",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}},
                   "required": ["id"]}}}]
BODY_KEYS = ("model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens",
             "seed", "user", "response_format")
SCHEMA_FORMAT = {"type": "json_object", "schema": {  # how EDV's stages ask for JSON
    "type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}}


@pytest.fixture
def srv():
    server = ScriptedServer().start()
    yield server
    server.stop()


def _call(server, transport, **kw):
    ledger = CallLedger()
    ep = Endpoint("scripted", "hosted_vllm/scripted", server.base_url)
    out = LLMClient(timeout_s=10, max_retries=2, backoff_base_s=0.1, transport=transport
                    ).complete(ep, MSGS, ctx=CTX, ledger=ledger, tools=TOOLS,
                               sampling=Sampling(temperature=0.2, seed=7), **kw)
    return out, ledger.records[0]


def test_both_transports_send_the_same_request_and_read_the_same_answer(srv):
    srv.add_script("tester", lambda req, tag: {
        "role": "assistant", "content": None, "reasoning_content": "look it up first",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "lookup", "arguments": '{"id": "X1"}'}}]})
    got = {}
    for transport in ("litellm", "openai_sdk"):
        out, rec = _call(srv, transport, response_format=SCHEMA_FORMAT)
        body = srv.requests[-1]
        got[transport] = ({k: body.get(k) for k in BODY_KEYS}, out, rec)
    (lite_body, lite, lite_rec), (sdk_body, sdk, sdk_rec) = got["litellm"], got["openai_sdk"]
    assert sdk_body == lite_body
    assert sdk_body["model"] == "scripted" and sdk_body["user"] == CTX.tag()
    assert sdk_body["messages"] == MSGS and sdk_body["tools"] == TOOLS
    assert sdk_body["response_format"] == SCHEMA_FORMAT
    assert (sdk.content, sdk.tool_calls, sdk.reasoning, sdk.finish_reason) == (
        lite.content, lite.tool_calls, lite.reasoning, lite.finish_reason)
    assert sdk.tool_calls == [{"id": "c1", "name": "lookup", "arguments": '{"id": "X1"}'}]
    assert (sdk.prompt_tokens, sdk.completion_tokens) == (lite.prompt_tokens,
                                                          lite.completion_tokens) != (0, 0)
    assert sdk_rec.ok and lite_rec.ok and sdk_rec.attempts == lite_rec.attempts == 1


def test_the_sdk_transport_retries_server_errors_and_garbage(srv):
    srv.fail_next("500", 1)
    srv.fail_next("garbage", 1)
    out, rec = _call(srv, "openai_sdk")
    assert out.content and rec.ok and rec.attempts == 3 and len(srv.requests) == 3


def test_the_sdk_transport_does_not_retry_a_bad_key(srv):
    srv.fail_next("401", 1)
    with pytest.raises(LLMCallError, match="after 1 attempt") as exc:
        _call(srv, "openai_sdk")
    assert isinstance(exc.value.__cause__, openai.AuthenticationError)
    assert len(srv.requests) == 1


def test_the_sdk_transport_is_cut_at_the_wall_clock_bound(srv):
    srv.trickle_s = 60.0
    srv.fail_next("trickle", 1)
    ep = Endpoint("scripted", "openai/scripted", srv.base_url)
    t0 = time.monotonic()
    with pytest.raises(LLMCallError):
        LLMClient(timeout_s=2, max_retries=0, transport="openai_sdk").complete(ep, MSGS, ctx=CTX)
    assert time.monotonic() - t0 < 10
    assert aio.open_tasks() == 0


def test_only_openai_compatible_models_take_the_sdk_path():
    assert is_openai_compatible("openai/qwen") and is_openai_compatible("hosted_vllm/x")
    assert not is_openai_compatible("anthropic/claude") and not is_openai_compatible("gemini/x")


def test_by_default_self_served_endpoints_take_the_direct_path_and_others_litellm():
    url = "http://10.0.0.5:8000/v1"
    assert path_for("auto", "openai/qwen", url) == "openai_sdk"  # vLLM / llama.cpp actors
    assert path_for("auto", "hosted_vllm/glm", url) == "openai_sdk"
    assert path_for("auto", "openai/gpt-4o-mini", None) == "litellm"  # OpenAI itself
    assert path_for("auto", "anthropic/claude", url) == "litellm"  # other providers
    assert path_for("litellm", "openai/qwen", url) == "litellm"  # forced
    assert path_for("openai_sdk", "gemini/x", url) == "litellm"  # never for other formats
    assert LLMConfig().transport == "auto" and LLMClient().transport == "auto"


class _Seen(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.models: list[str] = []

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self.models.append(kwargs.get("model"))


def test_a_default_client_reaches_a_self_served_server_without_litellm(srv):
    """litellm's success hook sees every call it makes: none for the default path to a
    server with a URL, one when litellm is forced."""
    import litellm

    seen = _Seen()
    litellm.callbacks.append(seen)
    try:
        for transport in ("auto", "litellm"):
            out, rec = _call(srv, transport)
            assert out.content and rec.ok
        deadline = time.monotonic() + 5  # litellm logs success in a background task
        while not seen.models and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        litellm.callbacks.remove(seen)
    assert len(srv.requests) == 2
    assert seen.models == ["scripted"]  # the forced litellm call only


def test_warm_up_needs_no_server(srv):
    warm_up()
    assert srv.requests == []


def test_a_self_served_model_gets_a_zero_price_in_litellm_once(srv):
    """litellm would otherwise search its price tables for the unknown name after every
    call (and might price it as a hosted model); a model it knows keeps its entry."""
    import litellm

    from edv_ray.llm.transport import price_as_self_served

    _call(srv, "litellm")
    entry = litellm.model_cost["hosted_vllm/scripted"]
    assert entry["input_cost_per_token"] == entry["output_cost_per_token"] == 0.0
    known = next(k for k, v in litellm.model_cost.items()
                 if (v.get("input_cost_per_token") or 0) > 0)
    before = dict(litellm.model_cost[known])
    price_as_self_served(known)
    assert litellm.model_cost[known]["input_cost_per_token"] == before["input_cost_per_token"] > 0
    bare = next(k for k, v in litellm.model_cost.items()
                if "/" not in k and (v.get("input_cost_per_token") or 0) > 0
                and f"openai/{k}" not in litellm.model_cost)
    price_as_self_served(f"openai/{bare}")  # a hosted model behind an explicit URL
    assert f"openai/{bare}" not in litellm.model_cost
