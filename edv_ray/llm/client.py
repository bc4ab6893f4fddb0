"""The one path for model calls: wall-clock bounds, retries, a circuit breaker per endpoint
and a token ledger, over the direct OpenAI wire path (self-served OpenAI-compatible
servers) or litellm (every other provider) — :mod:`edv_ray.llm.transport`.

Every call is attributed (run, stage, role, agent, model, task, trial, episode) and
recorded with prompt/completion tokens and latency, whether it succeeds or not. The
attribution also travels to the server in the OpenAI ``user`` field
(``edv|<role>|<agent>|<domain>|<task_id>|<trial>|<episode_id>``): real servers ignore or log
it, a replica picker can keep one episode on one replica, and the scripted test server uses it.
API keys are read from the environment at call time and never stored; a self-served
engine's per-run key is looked up by its URL (:func:`set_served_key`), in memory only.

Time bounds. Each attempt is bounded in *wall-clock* time by ``min(timeout_s, time left to
the episode deadline)``, including a server that trickles its answer byte by byte (httpx
timeouts alone bound each read, not the call). The attempt runs as a task on one shared
background event loop (:mod:`edv_ray.llm.aio`) through the OpenAI SDK's client (self-served
OpenAI-compatible endpoints) or ``litellm.acompletion`` (the rest; see
:mod:`edv_ray.llm.transport`); at the bound the task is cancelled, which closes its
connection — no abandoned thread or socket is left behind, however many calls time out.
An attempt cut short by the episode deadline raises :class:`EpisodeDeadlineExceeded`.

Retries. Transient failures (5xx, timeouts, connection errors, rate limits, garbled
bodies) are retried with exponential backoff and jitter (:func:`~edv_ray.llm.breaker.
backoff_delay`), at most ``max_retries`` times and only while the call is younger than
``retry_budget_s``. 400/401/403/404 are never retried.

Circuit breaker (:mod:`edv_ray.llm.breaker`). After ``breaker_threshold`` consecutive
connection-level failures of one api_base (refused/reset, 502/503/504, wall timeouts) the
breaker opens. Calls to that endpoint then *wait* — without spending retries, bounded by
their deadline (or ``outage_wait_s`` without one) — while one of them probes every
``probe_interval_s``; the first answer closes the breaker and releases everyone. A call that
cannot wait long enough fails with :class:`EndpointUnavailable` (an :class:`LLMCallError`).

Re-routing. The URL is resolved again for every attempt and while waiting: an optional
``api_base_resolver(endpoint)`` passed to :meth:`LLMClient.complete` wins; otherwise
:meth:`Endpoint.resolve_api_base` consults the process-wide table filled by
:func:`set_api_base_resolver` (so a server restarted on a new port can be re-routed live
without changing the serialisable :class:`Endpoint`). Breakers are per resolved URL.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import json
import random
import threading
import time
from typing import Any, Callable

import httpx
import httpx2
import litellm
import openai

from edv_ray.config import Sampling
from edv_ray.llm.breaker import (
    BreakerRegistry,
    BreakerWaitExpired,
    WallClockTimeout,
    backoff_delay,
    is_connection_failure,
)
# the call's data and where it goes live apart (importing them loads no HTTP client);
# they are re-exported here, the one module callers import
from edv_ray.llm.calls import (CallContext, CallLedger, CallRecord, Completion,  # noqa: F401
                               EndpointUnavailable, EpisodeDeadlineExceeded, LLMCallError,
                               request_fingerprint)
from edv_ray.llm.endpoints import (Endpoint, served_keys, set_api_base_resolver,  # noqa: F401
                                   set_served_key)
from edv_ray.llm.transport import Transport, request
from edv_ray.llm.usage import read_usage

litellm.suppress_debug_info = True
litellm.drop_params = True


_NOT_TRANSIENT = (
    openai.BadRequestError,
    openai.AuthenticationError,
    openai.PermissionDeniedError,
    openai.NotFoundError,
)


def is_transient(err: BaseException) -> bool:
    """Server 5xx, timeouts, connection errors, rate limits and garbled bodies retry."""
    if isinstance(err, _NOT_TRANSIENT):
        return False
    return isinstance(err, (openai.APIError, litellm.exceptions.APIError, json.JSONDecodeError,
                            WallClockTimeout, httpx.TransportError,
                            httpx2.TransportError))


class _CallFailed(Exception):
    """Internal: stop retrying with this final error (already typed for the caller)."""


class _Call:
    """One call's attempts: the request, its clock and the rows and errors it ends with."""

    def __init__(self, client: "LLMClient", endpoint: Endpoint, kwargs: dict[str, Any],
                 ctx: CallContext, ledger: CallLedger | None, sampling: Sampling,
                 deadline: float | None) -> None:
        self.client, self.endpoint, self.kwargs = client, endpoint, kwargs
        self.ctx, self.ledger, self.sampling, self.deadline = ctx, ledger, sampling, deadline
        self.started, self.t0 = time.time(), time.monotonic()
        self.attempts = 0
        self.wait_until = self.t0 + client.outage_wait_s
        if deadline is not None:
            self.wait_until = min(self.wait_until, deadline)

    def record(self, ok: bool, err: str | None, pt: int | None = 0, ct: int | None = 0,
               usage_invalid: bool = False) -> None:
        if self.ledger is None:
            return
        ctx = self.ctx
        self.ledger.add(CallRecord(
            run_id=ctx.run_id, stage=ctx.stage, role=ctx.role, agent=ctx.agent,
            model=self.endpoint.model_name, task_id=ctx.task_id, trial=ctx.trial,
            episode_id=ctx.episode_id, epoch=ctx.epoch, prompt_tokens=pt,
            completion_tokens=ct, latency_s=time.monotonic() - self.t0,
            attempts=self.attempts, ok=ok, error=err, started_at=self.started,
            seed=self.sampling.seed, request_hash=request_fingerprint(self.kwargs),
            evidence_chars=ctx.evidence_chars, evidence_kept=ctx.evidence_kept,
            evidence_final_kept=ctx.evidence_final_kept, usage_invalid=usage_invalid,
        ))

    def _who(self) -> str:
        return (f"{self.endpoint.model_name} ({self.ctx.role}/{self.ctx.agent}) failed after "
                f"{self.attempts} attempt(s)")

    def failed(self, err: BaseException, why: str = "") -> _CallFailed:
        self.record(False, f"{type(err).__name__}: {err}"[:500])
        final = LLMCallError(f"{self._who()}: {type(err).__name__}: {str(err)[:300]}{why}")
        final.__cause__ = err
        return _CallFailed(final)

    def out_of_time(self, msg: str, cause: BaseException | None = None) -> _CallFailed:
        self.record(False, msg)
        final = EpisodeDeadlineExceeded(msg)
        final.__cause__ = cause
        return _CallFailed(final)

    def unavailable(self, detail: str, cause: BaseException | None) -> _CallFailed:
        where = ("the episode deadline"
                 if self.deadline is not None and self.wait_until >= self.deadline
                 else f"outage_wait_s={self.client.outage_wait_s:g}")
        msg = f"{self._who()}: {detail}; stopped waiting at {where}"
        self.record(False, msg[:500])
        final = EndpointUnavailable(msg)
        final.__cause__ = cause
        return _CallFailed(final)

    def run(self, api_key: str, resolver: Callable[[Endpoint], str | None] | None) -> Any:
        """Attempts until an answer, or the :class:`_CallFailed` that ends the call."""
        client, deadline = self.client, self.deadline
        retries, last_err = 0, None
        while True:
            api_base = (resolver(self.endpoint) if resolver is not None
                        else None) or self.endpoint.resolve_api_base()
            breaker = client.breakers.get(api_base)
            try:
                mode = breaker.acquire(self.wait_until, slice_s=client.probe_interval_s)
            except BreakerWaitExpired as exc:
                raise self.unavailable(str(exc), last_err) from None
            if mode == "again":
                continue  # re-resolve the URL, then wait on (maybe another) breaker
            probe = mode == "probe"
            bound = client.timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    if probe:
                        breaker.release_probe()
                    if breaker.is_open:  # the outage, not the episode, is the story
                        raise self.unavailable(breaker.describe(), last_err)
                    raise self.out_of_time("episode time budget exhausted", last_err)
                bound = min(bound, left)
            self.attempts += 1
            try:
                resp = request(self.kwargs, api_base, api_key, bound, client.transport)
            except (KeyboardInterrupt, SystemExit):
                if probe:
                    breaker.release_probe()  # never leave the breaker without a prober
                raise
            except Exception as err:  # noqa: BLE001 - classified below
                last_err = err
                if isinstance(err, WallClockTimeout) and bound < client.timeout_s:
                    if probe:
                        breaker.release_probe()
                    if breaker.is_open:
                        raise self.unavailable(breaker.describe(), err) from None
                    raise self.out_of_time("episode time budget exhausted during a model call "
                                           f"({err})", err) from None
                if is_connection_failure(err):
                    if breaker.failure(f"{type(err).__name__}: {err}", probe):
                        continue  # open: wait for the endpoint, spend no retry
                else:
                    breaker.success(probe)  # it answered, if with an error
                if not is_transient(err):
                    raise self.failed(err) from None
                retries += 1
                if retries > client.max_retries:
                    raise self.failed(err) from None
                delay = client.backoff(retries)
                if time.monotonic() + delay - self.t0 > client.retry_budget_s:
                    raise self.failed(err, f" (retry budget {client.retry_budget_s:g} s spent)") \
                        from None
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise self.failed(err, " (no time left before the episode deadline)") \
                        from None
                time.sleep(delay)
                continue
            breaker.success(probe)
            return resp


class LLMClient:
    def __init__(self, timeout_s: float = 120.0, max_retries: int = 2, *,
                 retry_budget_s: float = 300.0, backoff_base_s: float = 0.5,
                 backoff_cap_s: float = 8.0, breaker_threshold: int = 5,
                 probe_interval_s: float = 2.0, outage_wait_s: float = 600.0,
                 seed: int | None = None, transport: Transport = "auto") -> None:
        self.timeout_s = timeout_s
        self.transport = transport
        self.max_retries = max_retries
        self.retry_budget_s = retry_budget_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.probe_interval_s = probe_interval_s
        self.outage_wait_s = outage_wait_s
        self.breakers = BreakerRegistry(breaker_threshold, probe_interval_s)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()

    def backoff(self, retry: int) -> float:
        with self._rng_lock:
            return backoff_delay(retry, self.backoff_base_s, self.backoff_cap_s, self._rng)

    def complete(
        self,
        endpoint: Endpoint,
        messages: list[dict[str, Any]],
        *,
        ctx: CallContext,
        ledger: CallLedger | None = None,
        sampling: Sampling | None = None,
        tools: list[dict[str, Any]] | None = None,
        response_format: dict[str, Any] | None = None,
        deadline: float | None = None,
        api_base_resolver: Callable[[Endpoint], str | None] | None = None,
    ) -> Completion:
        sampling = sampling or Sampling()
        api_key = endpoint.api_key()
        kwargs: dict[str, Any] = dict(
            model=endpoint.litellm_model,
            messages=messages,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            extra_body={"user": ctx.tag()},  # litellm drops a plain `user=` here
            num_retries=0,
            max_retries=0,
        )
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        if response_format is not None:
            kwargs["response_format"] = response_format
        call = _Call(self, endpoint, kwargs, ctx, ledger, sampling, deadline)
        try:
            resp = call.run(api_key, api_base_resolver)
        except _CallFailed as stop:
            raise stop.args[0] from stop.args[0].__cause__
        choice = resp.choices[0]
        # the server's usage is input: checked, an invalid count stored as unknown (null)
        pt, ct, bad_usage = read_usage(getattr(resp, "usage", None))
        call.record(True, None, pt, ct, bad_usage)
        calls = [
            {"id": tc.id or f"call_{i}", "name": tc.function.name,
             "arguments": tc.function.arguments or "{}"}
            for i, tc in enumerate(choice.message.tool_calls or [])
        ]
        return Completion(
            content=choice.message.content, tool_calls=calls, prompt_tokens=pt or 0,
            completion_tokens=ct or 0, latency_s=time.monotonic() - call.t0,
            finish_reason=getattr(choice, "finish_reason", None),
            reasoning=getattr(choice.message, "reasoning_content", None) or None,
        )
