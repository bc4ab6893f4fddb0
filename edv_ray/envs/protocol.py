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
* renders a stored trajectory for Distill / Verify / judges;
* gives the benchmark's own figures over stored episodes, where it has any, for the
  report (``scoring_figures``);
* gives the player the simulated model engine (``edv_ray.simulation``) plays it with
  (``simulated_player``): the engine decides what happens in an episode, the player
  makes the benchmark see it, so a benchmark that implements the hook is simulated
  without an edit to the engine.
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


@dataclass(frozen=True)
class BenchmarkFigures:
    """A benchmark's own figures over some stored episodes, as the report prints them."""

    line: str  # the figures in one line, e.g. "official: all 0.400, 单 0.500, …; 5 missions"
    meaning: str  # what the figures mean under the run's scoring rules


@dataclass(frozen=True)
class SimulatedPlay:
    """What the simulated engine decided for one acting episode, handed to the player."""

    success: bool  # play the gold path (True) or a planted failure
    failure_mode: str  # the profile's failure mode ("stop_early", "wrong_argument"; "" on success)
    marker: str  # the run marker: every text turn the agent sends carries it
    draw: Callable[[str], float]  # draw(what) → a number in [0, 1) keyed by the episode

    def choose(self, options: list, what: str):
        """One of ``options`` (non-empty), chosen by ``draw(what)``."""
        return options[min(len(options) - 1, int(self.draw(what) * len(options)))]


class SimulatedPlayer(Protocol):
    """How the simulated engine plays a benchmark from the server side: it answers the
    chat requests of the benchmark's own episode code (our agents, the benchmark's
    grading), so the benchmark grades what the engine planted. Every answer is a
    function of the request, the task and the play (no state between requests)."""

    def warm_up(self, bench: Any) -> None:
        """Load, before the engine's first request, what answering needs (a slow load
        while serving would starve the engine's health probe)."""

    def agent_message(self, domain: str, task: Any, req: dict[str, Any],
                      play: SimulatedPlay) -> dict[str, Any]:
        """The acting agent's next assistant message (an OpenAI chat message) for the
        chat request ``req``: the gold path when ``play.success``, else a planted failure
        (``play.failure_mode``, where the task allows it); text turns carry ``play.marker``."""

    def user_message(self, domain: str, task: Any, req: dict[str, Any]) -> dict[str, Any]:
        """The user simulator's next message (KeyError: the benchmark has none)."""

    def run_outcome(self, domain: str, task: Any, transcript: str) -> bool | None:
        """A stored run's outcome read from its rendered transcript when no text turn
        carried a marker (a τ²-bench solo run); None: unknown."""


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

    def scoring_figures(self, bench: Any, details: list[dict[str, Any]]) -> BenchmarkFigures | None:
        """The benchmark's own figures over episodes whose stored reward details
        (``reward_json``) are ``details``, under ``bench``'s scoring rules; None where the
        benchmark reports none (the same for every ``details``: ask with ``[]`` first)."""

    def simulated_player(self) -> SimulatedPlayer:
        """The player ``engine: simulated`` plays this benchmark with."""


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


def memo(table: dict, key, make: Callable[[], Any], lock) -> Any:
    """``table[key]``, made by ``make()`` the first time — outside ``lock``, so a slow make
    never blocks other keys; of two threads racing on one key, the first value stays."""
    with lock:
        if key in table:
            return table[key]
    value = make()
    with lock:
        return table.setdefault(key, value)


def get_env(name: str) -> Environment:
    import importlib

    if name not in _ENVS:
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(_ENVS)}")
    return importlib.import_module(_ENVS[name]).ENV
