"""The unit of work the runtime fans out: one (stage, epoch, task, trial, agent) attempt."""

from __future__ import annotations

import hashlib
import json
import re

from pydantic import BaseModel, ConfigDict, Field

from edv_ray.config import Sampling
from edv_ray.llm.endpoints import Endpoint  # no model-call client (litellm)


class MemoryRequest(BaseModel):
    """Retrieval the worker performs once the agent observes its task (the ticket, or
    the user's first message): ``provider`` is ``"module:function"`` — a function
    ``(observed_text, params) -> Retrieval`` of the method that owns the memory."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    params: dict = Field(default_factory=dict)
    # a fingerprint of the memory the provider will read (e.g. a frozen bank's item ids):
    # part of the episode's identity, so an episode run with other memory is another one
    version: str = ""

    def key(self) -> str:
        """The memory's identity: provider, parameters and version. Parameters whose name
        starts with ``_`` only *locate* the memory (a folder path) and are left out, so a
        run folder resumed under another path or moved keeps its episode ids."""
        params = {k: v for k, v in self.params.items() if not k.startswith("_")}
        blob = json.dumps([self.provider, params, self.version], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


class Retrieval(BaseModel):
    texts: list[str] = Field(default_factory=list)  # injected into the system prompt
    item_ids: list[str] = Field(default_factory=list)
    banks: list[str] = Field(default_factory=list)


class EpisodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    run_id: str
    stage: str  # execute | infer | eval | ...
    method: str
    benchmark: dict  # the run's benchmark section (the worker builds its environment from it)
    task_split: str | None = None  # the split the task was selected from, where it matters
    epoch: int = 0
    domain: str
    task_id: str
    task_type: str
    trial: int = 0
    attempt: int = 1
    agent: str
    model: str
    prompt_strategy: str
    sampling: Sampling
    agent_endpoint: Endpoint
    user_model: str | None = None
    user_endpoint: Endpoint | None = None
    user_sampling: Sampling | None = None
    solo: bool
    seed: int | None = None
    max_steps: int = 30
    max_errors: int = 5
    timeout_s: float = 900.0
    memory: MemoryRequest | None = None  # None = no memory (experiences stay empty)

    @property
    def memory_key(self) -> str | None:
        return None if self.memory is None else self.memory.key()

    @property
    def episode_id(self) -> str:
        return episode_id(self.stage, self.epoch, self.domain, self.task_id, self.trial,
                          self.agent, self.memory_key)


def episode_id(stage: str, epoch: int, domain: str, task_id: str, trial: int, agent: str,
               memory_key: str | None = None) -> str:
    """Stable and filename-safe: a readable prefix plus a hash of the full key.

    The key is everything that changes the episode within a run: stage (its semantics:
    a construction execution, an evaluation, ...), epoch, task, trial, agent (its model,
    prompt strategy, sampling and seed are fixed by the run config) and the memory it is
    given (``memory_key``: None = no memory). Two methods share an episode only when all
    of these are equal — e.g. EDV's first construction epoch (empty bank: no memory) and
    Router's executions of the same seeded groups; never EDV's memory-guided epochs."""
    parts = [stage, str(epoch), domain, task_id, str(trial), agent]
    if memory_key:
        parts.append(f"mem={memory_key}")
    digest = hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9]+", "_", task_id).strip("_")[:24]
    return f"{stage}-e{epoch}-{domain}-{slug}-t{trial}-{agent}{'-m' if memory_key else ''}-{digest}"
