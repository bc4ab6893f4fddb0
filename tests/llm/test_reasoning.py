"""A thinking model's reasoning (the server's reasoning parser output) reaches the
Completion, so agents can send it back on later turns."""

from __future__ import annotations

from edv_ray.llm.client import CallContext, Endpoint, LLMClient


def test_reasoning_content_is_kept(server):
    server.add_script("agent", lambda req, tag: {
        "role": "assistant", "content": "Booked.", "reasoning_content": "check the fare first"})
    ep = Endpoint("scripted", "openai/scripted", server.base_url)
    ctx = CallContext(run_id="r", stage="s", role="agent", agent="a")
    out = LLMClient(timeout_s=10).complete(ep, [{"role": "user", "content": "hi"}], ctx=ctx)
    assert out.content == "Booked." and out.reasoning == "check the fare first"
    server.add_script("agent", lambda req, tag: {"role": "assistant", "content": "Booked."})
    plain = LLMClient(timeout_s=10).complete(ep, [{"role": "user", "content": "hi"}], ctx=ctx)
    assert plain.reasoning is None
