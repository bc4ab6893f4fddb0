"""The one path for model calls: wall-clock bounds, retries, a circuit breaker per endpoint
and a token ledger, over the direct OpenAI wire path (self-served OpenAI-compatible
servers) or litellm (every other provider) — :mod:`edv_ray.llm.transport`.

Every call is attributed (run, stage, role, agent, model, task, trial, episode) and
recorded with prompt/completion tokens and latency, whether it succeeds or not. The
attribution also travels to the server in the OpenAI ``user`` field
(``edv|<role>|<agent>|<domain>|<task_id>|<trial>|<episode_id>``): real servers ignore or log
it, a router can keep one episode on one replica, and the scripted test server uses it.
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
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import httpx
import httpx2
import litellm
import openai

from edv_ray.config import Sampling
from edv_ray.llm.transport import Transport, request
from edv_ray.llm.usage import read_usage
from edv_ray.llm.breaker import (
    BreakerRegistry,
    BreakerWaitExpired,
    WallClockTimeout,
    backoff_delay,
    is_connection_failure,
)

litellm.suppress_debug_info = True
litellm.drop_params = True


class EpisodeDeadlineExceeded(RuntimeError):
    """The episode ran past its time budget (an infrastructure error, not an agent failure)."""


class LLMCallError(RuntimeError):
    """A model call failed after its retries (the original error is chained)."""


class EndpointUnavailable(LLMCallError):
    """The endpoint's circuit breaker stayed open for as long as the call could wait."""


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


# ---- live re-routing -------------------------------------------------------------------
_RESOLVERS: dict[str, Callable[[], str | None]] = {}
_RESOLVERS_LOCK = threading.Lock()


def set_api_base_resolver(api_base: str, resolver: Callable[[], str | None] | None) -> None:
    """Route every call of endpoints configured with ``api_base`` to ``resolver()`` (asked
    once per attempt; ``None`` from it means "use the configured URL"). ``resolver=None``
    removes the route. Process-wide: the episode threads of a worker all see it."""
    with _RESOLVERS_LOCK:
        if resolver is None:
            _RESOLVERS.pop(api_base, None)
        else:
            _RESOLVERS[api_base] = resolver


# ---- keys of self-served engines -------------------------------------------------------
_SERVED_KEYS: dict[str, str] = {}  # first URL of a self-served server → its engine's key


def set_served_key(api_base: str, key: str | None) -> None:
    """The key the self-served engine first at ``api_base`` requires (``None`` removes it).
    Held in this process's memory only: the driver registers it when it starts the
    engines, workers when they fetch it from the run's ``RunState`` actor."""
    with _RESOLVERS_LOCK:
        if key is None:
            _SERVED_KEYS.pop(api_base, None)
        else:
            _SERVED_KEYS[api_base] = key


def served_keys(api_bases) -> dict[str, str]:
    """The registered keys of these first URLs (for handing on to workers)."""
    with _RESOLVERS_LOCK:
        return {u: _SERVED_KEYS[u] for u in api_bases if u in _SERVED_KEYS}


@dataclass(frozen=True)
class Endpoint:
    """How litellm reaches one model (a served replica or an external endpoint)."""

    model_name: str  # the config's model name
    litellm_model: str  # e.g. openai/qwen2.5-coder-0.5b-instruct
    api_base: str | None = None
    api_key_env: str | None = None

    def api_key(self) -> str:
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise LLMCallError(f"environment variable {self.api_key_env} is not set")
            return key
        with _RESOLVERS_LOCK:  # a self-served engine's per-run key (see set_served_key)
            served = _SERVED_KEYS.get(self.api_base or "")
        return served or "sk-edv-local"  # a keyless server still needs some key sent

    def resolve_api_base(self) -> str | None:
        """The URL to use for the next attempt (see :func:`set_api_base_resolver`)."""
        with _RESOLVERS_LOCK:
            fn = _RESOLVERS.get(self.api_base or "")
        live = fn() if fn is not None else None
        return live or self.api_base


@dataclass(frozen=True)
class CallContext:
    run_id: str
    stage: str
    role: str
    agent: str
    domain: str = ""
    task_id: str = ""
    trial: int = 0
    episode_id: str = ""
    epoch: int = 0
    # a stage prompt's evidence (transcript characters whole / kept, final states whole);
    # None for calls without transcripts (see prompts.budget.Evidence)
    evidence_chars: int | None = None
    evidence_kept: int | None = None
    evidence_final_kept: bool | None = None

    def tag(self) -> str:
        return "|".join(["edv", self.role, self.agent, self.domain, self.task_id,
                         str(self.trial), self.episode_id])


@dataclass
class CallRecord:
    run_id: str
    stage: str
    role: str
    agent: str
    model: str
    task_id: str
    trial: int
    episode_id: str
    epoch: int
    prompt_tokens: int | None  # None: the server's count was missing or not a count
    completion_tokens: int | None
    latency_s: float
    attempts: int
    ok: bool
    error: str | None
    started_at: float
    seed: int | None = None  # the sampling seed the request carried
    request_hash: str = ""  # a fingerprint of the request (model, messages, sampling, tools)
    evidence_chars: int | None = None
    evidence_kept: int | None = None
    evidence_final_kept: bool | None = None
    usage_invalid: bool = False  # the server's usage was not a valid count (llm.usage)


def request_fingerprint(kwargs: dict[str, Any]) -> str:
    """What the model was asked, hashed (the tag naming the episode excluded): two agents
    that send equal fingerprints on the same task asked the same thing."""
    import hashlib
    import json

    keys = ("model", "messages", "temperature", "top_p", "max_tokens", "seed", "tools",
            "response_format")
    blob = json.dumps([kwargs.get(k) for k in keys], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass
class Completion:
    content: str | None
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments": str}]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None
    # a thinking model's reasoning, split out by the server's reasoning parser (litellm's
    # ``reasoning_content``); agents send it back on later turns as the chat template expects
    reasoning: str | None = None


@dataclass
class CallLedger:
    """Thread-safe list of call records for one episode or one stage step."""

    records: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rec: CallRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(r) for r in self.records]

    def tokens(self, role: str | None = None) -> tuple[int, int]:
        with self._lock:
            recs = [r for r in self.records if role is None or r.role == role]
        # known counts only (an invalid usage is null on its call row, see llm.usage)
        return (sum(r.prompt_tokens or 0 for r in recs),
                sum(r.completion_tokens or 0 for r in recs))


class _CallFailed(Exception):
    """Internal: stop retrying with this final error (already typed for the caller)."""


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
        started, t0 = time.time(), time.monotonic()
        attempts = 0

        def record(ok: bool, err: str | None, pt: int | None = 0, ct: int | None = 0,
                   usage_invalid: bool = False) -> None:
            if ledger is not None:
                ledger.add(CallRecord(
                    run_id=ctx.run_id, stage=ctx.stage, role=ctx.role, agent=ctx.agent,
                    model=endpoint.model_name, task_id=ctx.task_id, trial=ctx.trial,
                    episode_id=ctx.episode_id, epoch=ctx.epoch, prompt_tokens=pt,
                    completion_tokens=ct, latency_s=time.monotonic() - t0,
                    attempts=attempts, ok=ok, error=err, started_at=started,
                    seed=sampling.seed, request_hash=request_fingerprint(kwargs),
                    evidence_chars=ctx.evidence_chars, evidence_kept=ctx.evidence_kept,
                    evidence_final_kept=ctx.evidence_final_kept, usage_invalid=usage_invalid,
                ))

        def failed(err: BaseException, why: str = "") -> _CallFailed:
            record(False, f"{type(err).__name__}: {err}"[:500])
            final = LLMCallError(
                f"{endpoint.model_name} ({ctx.role}/{ctx.agent}) failed after {attempts} "
                f"attempt(s): {type(err).__name__}: {str(err)[:300]}{why}")
            final.__cause__ = err
            return _CallFailed(final)

        def out_of_time(msg: str, cause: BaseException | None = None) -> _CallFailed:
            record(False, msg)
            final = EpisodeDeadlineExceeded(msg)
            final.__cause__ = cause
            return _CallFailed(final)

        def unavailable(breaker, detail: str, cause: BaseException | None) -> _CallFailed:
            where = ("the episode deadline" if deadline is not None and wait_until >= deadline
                     else f"outage_wait_s={self.outage_wait_s:g}")
            msg = (f"{endpoint.model_name} ({ctx.role}/{ctx.agent}) failed after {attempts} "
                   f"attempt(s): {detail}; stopped waiting at {where}")
            record(False, msg[:500])
            final = EndpointUnavailable(msg)
            final.__cause__ = cause
            return _CallFailed(final)

        wait_until = t0 + self.outage_wait_s
        if deadline is not None:
            wait_until = min(wait_until, deadline)
        retries, last_err = 0, None
        try:
            while True:
                api_base = (api_base_resolver(endpoint) if api_base_resolver is not None
                            else None) or endpoint.resolve_api_base()
                breaker = self.breakers.get(api_base)
                try:
                    mode = breaker.acquire(wait_until, slice_s=self.probe_interval_s)
                except BreakerWaitExpired as exc:
                    raise unavailable(breaker, str(exc), last_err) from None
                if mode == "again":
                    continue  # re-resolve the URL, then wait on (maybe another) breaker
                probe = mode == "probe"
                bound = self.timeout_s
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if probe:
                            breaker.release_probe()
                        if breaker.is_open:  # the outage, not the episode, is the story
                            raise unavailable(breaker, breaker.describe(), last_err)
                        raise out_of_time("episode time budget exhausted", last_err)
                    bound = min(bound, left)
                attempts += 1
                try:
                    resp = request(kwargs, api_base, api_key, bound, self.transport)
                except (KeyboardInterrupt, SystemExit):
                    if probe:
                        breaker.release_probe()  # never leave the breaker without a prober
                    raise
                except Exception as err:  # noqa: BLE001 - classified below
                    last_err = err
                    if isinstance(err, WallClockTimeout) and bound < self.timeout_s:
                        if probe:
                            breaker.release_probe()
                        if breaker.is_open:
                            raise unavailable(breaker, breaker.describe(), err) from None
                        raise out_of_time("episode time budget exhausted during a model call "
                                          f"({err})", err) from None
                    if is_connection_failure(err):
                        if breaker.failure(f"{type(err).__name__}: {err}", probe):
                            continue  # open: wait for the endpoint, spend no retry
                    else:
                        breaker.success(probe)  # it answered, if with an error
                    if not is_transient(err):
                        raise failed(err) from None
                    retries += 1
                    if retries > self.max_retries:
                        raise failed(err) from None
                    delay = self.backoff(retries)
                    if time.monotonic() + delay - t0 > self.retry_budget_s:
                        raise failed(err, f" (retry budget {self.retry_budget_s:g} s spent)") \
                            from None
                    if deadline is not None and time.monotonic() + delay >= deadline:
                        raise failed(err, " (no time left before the episode deadline)") \
                            from None
                    time.sleep(delay)
                    continue
                breaker.success(probe)
                break
        except _CallFailed as stop:
            raise stop.args[0] from stop.args[0].__cause__
        choice = resp.choices[0]
        # the server's usage is input: checked, an invalid count stored as unknown (null)
        pt, ct, bad_usage = read_usage(getattr(resp, "usage", None))
        record(True, None, pt, ct, bad_usage)
        calls = [
            {"id": tc.id or f"call_{i}", "name": tc.function.name,
             "arguments": tc.function.arguments or "{}"}
            for i, tc in enumerate(choice.message.tool_calls or [])
        ]
        return Completion(
            content=choice.message.content, tool_calls=calls, prompt_tokens=pt or 0,
            completion_tokens=ct or 0, latency_s=time.monotonic() - t0,
            finish_reason=getattr(choice, "finish_reason", None),
            reasoning=getattr(choice.message, "reasoning_content", None) or None,
        )
