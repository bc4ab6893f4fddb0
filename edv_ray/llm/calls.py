"""What one model call is and leaves behind: its attribution (:class:`CallContext`), its
row (:class:`CallRecord`, gathered per episode or stage step by a :class:`CallLedger`),
its answer (:class:`Completion`) and the errors a caller sees. Plain data: importing it
loads no HTTP client and no litellm (:mod:`edv_ray.llm.client` makes the calls)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any


class EpisodeDeadlineExceeded(RuntimeError):
    """The episode ran past its time budget (an infrastructure error, not an agent failure)."""


class LLMCallError(RuntimeError):
    """A model call failed after its retries (the original error is chained)."""


class EndpointUnavailable(LLMCallError):
    """The endpoint's circuit breaker stayed open for as long as the call could wait."""



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

