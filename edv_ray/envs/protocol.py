"""The environment protocol: what every benchmark module provides to methods and runtime.

Everything outside ``envs/`` reaches a benchmark through :func:`get_env` (keyed by
``benchmark.name``); no other package imports a benchmark package. An environment:

* selects tasks (domain → tasks) for a split / ids / count;
* says what the solving agent *observes* of a task (the ticket, the user's first
  message, the web task) — retrieval and the Distill / Verify prompts use that text,
  never hidden grading or user-simulator instructions;
* gives the policy / instructions block, the Ability-Matrix task type, whether a task
  needs a user simulator;
* runs and grades one episode with experiences supplied by a callback that receives
  the observed text (so retrieval can wait for a conversation's first user message);
* renders a stored trajectory for Distill / Verify / judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

# observed text → experience texts to inject (called once per episode, before the
# agent's first answer)
ExperienceFn = Callable[[str], list[str]]


@dataclass
class EpisodeOutcome:
    reward: float
    success: bool
    termination: str
    messages: list[dict[str, Any]]  # JSON-able transcript
    reward_detail: dict[str, Any]
    observed_text: str  # what the agent saw of the task (retrieval key)
    extra: dict[str, Any] = field(default_factory=dict)


class Environment(Protocol):
    name: str
    task_noun: str  # how prompts name a task ("customer-service task", "web task", ...)

    def select_tasks(self, bench: Any, split: str, task_ids: list[str] | None,
                     num_tasks: int | None) -> dict[str, list]: ...

    def task_by_id(self, bench: Any, domain: str, task_id: str,
                   split: str | None = None) -> Any: ...

    def task_type(self, bench: Any, domain: str, task: Any) -> str: ...

    def needs_user_simulator(self, bench: Any, task: Any) -> bool: ...

    def policy(self, bench: Any, domain: str) -> str: ...

    def observed_text(self, bench: Any, task: Any, messages: list[dict[str, Any]]) -> str: ...

    def pre_episode_text(self, bench: Any, task: Any) -> str | None:
        """What the solving agent observes before the episode starts (None when it only
        appears during it, e.g. a simulated user's first message): task types by
        ``observed_cluster`` are learnt from it."""

    def render_trajectory(self, messages: list[dict[str, Any]], max_chars: int) -> str: ...

    def run_episode(self, bench: Any, spec: Any, task: Any, agent_binding: Any,
                    user_binding: Any, experiences: ExperienceFn | None) -> EpisodeOutcome: ...

    def warm_up(self, bench: Any, domain: str) -> None:
        """Build, in this process, what every episode of ``domain`` shares (called on each
        worker before a stage's episodes start; a no-op where nothing is shared)."""


_ENVS: dict[str, str] = {  # benchmark.name → module defining ENV
    "tau2": "edv_ray.envs.tau2.env",
    "mind2web": "edv_ray.envs.mind2web.env",
    "mmtb": "edv_ray.envs.mmtb.env",
}


# notices benchmark packages log at import, which a user cannot act on: τ²-bench looks for
# a .env file (we pass endpoints and keys explicitly) and reports its Anthropic-only
# thinking switch
IMPORT_NOTICES = ("No .env file found", "Sonnet thinking is disabled")


def not_a_notice(record) -> bool:
    """loguru filter: every record except the import notices above."""
    return not any(record["message"].startswith(n) for n in IMPORT_NOTICES)


def quiet_logs() -> None:
    """Benchmark packages log through loguru at INFO (τ²-bench logs every step): keep
    warnings (``LOGURU_LEVEL`` to change), without the import notices. Call it before
    the benchmark is imported, in the driver and in every worker process."""
    import os
    import sys

    try:
        from loguru import logger
    except ImportError:
        return
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("LOGURU_LEVEL", "WARNING"), filter=not_a_notice)


def get_env(name: str) -> Environment:
    import importlib

    if name not in _ENVS:
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(_ENVS)}")
    return importlib.import_module(_ENVS[name]).ENV
