"""The one path for model calls: litellm with timeouts, bounded retries and a token ledger.

Every call is attributed (run, stage, role, agent, model, task, trial, episode) and
recorded with prompt/completion tokens and latency, whether it succeeds or not. The
attribution also travels to the server in the OpenAI ``user`` field
(``edv|<role>|<agent>|<domain>|<task_id>|<trial>|<episode_id>``): real servers ignore or log
it, a router can keep one episode on one replica, and the scripted test server uses it.
API keys are read from the environment at call time and never stored.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import litellm
import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from edv_ray.config import Sampling

litellm.suppress_debug_info = True
litellm.drop_params = True


class EpisodeDeadlineExceeded(RuntimeError):
    """The episode ran past its time budget (an infrastructure error, not an agent failure)."""


class LLMCallError(RuntimeError):
    """A model call failed after its retries (the original error is chained)."""


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
    return isinstance(err, (openai.APIError, litellm.exceptions.APIError, json.JSONDecodeError))


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
        return "sk-edv-local"  # self-served servers need some key, not a secret


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
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    ok: bool
    error: str | None
    started_at: float


@dataclass
class Completion:
    content: str | None
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments": str}]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None


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
        return sum(r.prompt_tokens for r in recs), sum(r.completion_tokens for r in recs)


class LLMClient:
    def __init__(self, timeout_s: float = 120.0, max_retries: int = 2) -> None:
        self.timeout_s = timeout_s
        self.max_retries = max_retries

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
    ) -> Completion:
        sampling = sampling or Sampling()
        kwargs: dict[str, Any] = dict(
            model=endpoint.litellm_model,
            messages=messages,
            api_base=endpoint.api_base,
            api_key=endpoint.api_key(),
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
        started, t0, attempts = time.time(), time.monotonic(), 0

        def one_call() -> Any:
            nonlocal attempts
            attempts += 1
            timeout = self.timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EpisodeDeadlineExceeded("episode time budget exhausted")
                timeout = min(timeout, left)
            resp = litellm.completion(timeout=timeout, **kwargs)
            if not getattr(resp, "choices", None):
                raise json.JSONDecodeError("response has no choices", str(resp)[:200], 0)
            return resp

        def record(ok: bool, err: str | None, pt: int = 0, ct: int = 0) -> None:
            if ledger is not None:
                ledger.add(CallRecord(
                    run_id=ctx.run_id, stage=ctx.stage, role=ctx.role, agent=ctx.agent,
                    model=endpoint.model_name, task_id=ctx.task_id, trial=ctx.trial,
                    episode_id=ctx.episode_id, epoch=ctx.epoch, prompt_tokens=pt,
                    completion_tokens=ct, latency_s=time.monotonic() - t0,
                    attempts=attempts, ok=ok, error=err, started_at=started,
                ))

        try:
            resp = Retrying(
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential(multiplier=0.5, max=8),
                retry=retry_if_exception(is_transient),
                reraise=True,
            )(one_call)
        except EpisodeDeadlineExceeded as err:
            record(False, str(err))
            raise
        except Exception as err:  # noqa: BLE001 - recorded, then re-raised typed
            record(False, f"{type(err).__name__}: {err}"[:500])
            raise LLMCallError(
                f"{endpoint.model_name} ({ctx.role}/{ctx.agent}) failed after {attempts} "
                f"attempt(s): {type(err).__name__}: {str(err)[:300]}"
            ) from err
        choice = resp.choices[0]
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        record(True, None, pt, ct)
        calls = [
            {"id": tc.id or f"call_{i}", "name": tc.function.name,
             "arguments": tc.function.arguments or "{}"}
            for i, tc in enumerate(choice.message.tool_calls or [])
        ]
        return Completion(
            content=choice.message.content, tool_calls=calls, prompt_tokens=pt,
            completion_tokens=ct, latency_s=time.monotonic() - t0,
            finish_reason=getattr(choice, "finish_reason", None),
        )
