"""How one attempt of a model call reaches its server (retries, bounds and the breaker stay
in :class:`~edv_ray.llm.client.LLMClient`, whichever path is used).

Two paths (``llm.transport``; DESIGN.md, decided in round 3):

``openai_sdk`` — the direct OpenAI wire path: the request body is POSTed as is through the
OpenAI SDK's client on the shared pooled connections (:mod:`edv_ray.llm.aio`). For
OpenAI-compatible servers only (``openai/…`` and ``hosted_vllm/…`` models: vLLM,
llama.cpp, any ``/v1/chat/completions`` server); no parameter translation.

``litellm`` — ``litellm.acompletion``: every provider litellm knows, its parameter mapping,
cost and logging hooks.

``auto`` (the default) takes the direct path for *self-served* OpenAI-compatible endpoints
— the vLLM / llama.cpp actors a run starts, and any ``openai/`` or ``hosted_vllm/`` model
with an explicit ``api_base`` — and litellm for every other provider (hosted APIs, and
``openai/…`` without a URL, i.e. OpenAI itself). Both paths are tested to send the same
body (``tests/llm/test_transport.py``).

Why: what the direct path skips is litellm's per-call bookkeeping (a logging object and
success handler, response-cost lookup, request and response re-typing): CPU per call on
the worker's event loop at 64 in flight, 8 tools, scripted server — litellm ~3.9 ms (with
the zero price below; ~4.5 ms without), this path ~1.3 ms (2.3 ms through
``chat.completions.create``, whose TypedDict walk of every message and tool schema is
skipped here as litellm skips it). That CPU is what bounds a worker at 64–128 calls in
flight: ``experiments/bench/scale.py`` at 1 s/call, 128 in flight, 2 workers on 2 cores,
1,000 episodes: 0.71–0.86 of the LLM-bound ideal with litellm, 0.86–0.91 with this (3,000
episodes: 0.83 and 0.94).

Both return an object with the OpenAI response shape (``choices[0].message``, ``usage``).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import litellm  # noqa: E402
from openai.types.chat import ChatCompletion  # noqa: E402

from edv_ray.llm import aio

Transport = Literal["auto", "litellm", "openai_sdk"]
OPENAI_COMPATIBLE = ("openai/", "hosted_vllm/")
_LITELLM_ONLY = ("num_retries", "max_retries", "extra_body")  # litellm's kwargs, not the API's
_priced: set[str] = set()
_priced_lock = threading.Lock()


def is_openai_compatible(litellm_model: str) -> bool:
    return litellm_model.startswith(OPENAI_COMPATIBLE)


def path_for(transport: Transport, litellm_model: str, api_base: str | None) -> str:
    """Which path a call takes: ``"openai_sdk"`` (direct) or ``"litellm"``."""
    if not is_openai_compatible(litellm_model) or transport == "litellm":
        return "litellm"
    if transport == "openai_sdk":
        return "openai_sdk"
    return "openai_sdk" if api_base else "litellm"  # auto: self-served = an explicit URL


def request(kwargs: dict[str, Any], api_base: str | None, api_key: str, bound: float,
            transport: Transport = "auto") -> Any:
    """One request, abandoned (task cancelled, connection closed) after ``bound`` s.
    ``kwargs``: litellm-style (``model`` with its provider prefix)."""
    openai_like = is_openai_compatible(kwargs["model"])
    # the request's own timeout a little later: the wall bound must be what fires
    timeout = bound + 1.0
    if path_for(transport, kwargs["model"], api_base) == "openai_sdk":
        body = {k: v for k, v in kwargs.items() if k not in _LITELLM_ONLY}
        body.update(kwargs.get("extra_body") or {})
        body["model"] = kwargs["model"].split("/", 1)[1]

        def make():
            # the body is already the wire format: a plain POST skips the SDK's walk of
            # every message and tool schema against its TypedDicts (~1 ms a call; litellm
            # posts the same way)
            return aio.openai_client(api_base, api_key).post(
                "/chat/completions", body=body, cast_to=ChatCompletion,
                options={"timeout": timeout})
    else:
        if openai_like and api_base:
            price_as_self_served(kwargs["model"])

        def make():
            extra: dict[str, Any] = {}
            if openai_like:  # our pooled transport (litellm would cache one per timeout)
                extra["client"] = aio.openai_client(api_base, api_key)
            return litellm.acompletion(timeout=timeout, api_base=api_base, api_key=api_key,
                                       **extra, **kwargs)

    resp = aio.run_bounded(make, bound)
    if not getattr(resp, "choices", None):
        raise json.JSONDecodeError("response has no choices", str(resp)[:200], 0)
    return resp


def price_as_self_served(litellm_model: str) -> None:
    """Give a model served behind an OpenAI-compatible URL (vLLM, llama.cpp) a zero
    per-token price in litellm's cost map, once per process, unless litellm already has an
    entry for it with or without its provider prefix (``openai/gpt-4o-mini`` through an
    explicit OpenAI URL keeps its price). Without one, litellm searches its price tables
    (fallback generalisations over every known model) after every call — ~0.5 ms of the
    worker's event loop, measured at 64 calls in flight — and may price the model as a
    hosted one of a similar name. edv-ray counts tokens itself and never reads litellm's
    cost."""
    if litellm_model in _priced:
        return
    with _priced_lock:
        if litellm_model in _priced:
            return
        known = litellm_model in litellm.model_cost or (
            litellm_model.split("/", 1)[1] in litellm.model_cost)
        if not known:
            litellm.register_model({litellm_model: {
                "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "mode": "chat",
                "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0,
                "litellm_provider": litellm_model.split("/", 1)[0]}})
        _priced.add(litellm_model)


_WARM_TOOL = {"type": "function", "function": {
    "name": "noop", "description": "warm-up", "parameters": {"type": "object", "properties": {}}}}


def warm_up() -> None:
    """Run litellm's call path once without a server (``mock_response``), on the shared
    loop. A process's first litellm call spends ~0.3 s importing and building its
    provider tables; in a worker that just started 64 episodes, every one of them waits
    behind it and they all call again at the same instant — waves that then persist.
    Only an optimisation: if it fails, the first real call pays the cost (and reports
    any real error itself)."""
    try:
        aio.run_bounded(lambda: litellm.acompletion(
            model="openai/edv-warm-up", messages=[{"role": "user", "content": "warm-up"}],
            tools=[_WARM_TOOL], mock_response="ok"), 60.0)
    except Exception:  # noqa: BLE001 - see above
        pass
