"""The shared shape of benchmarks read from files and played by a ``complete`` callable
(Mind2Web, MMTB): one pseudo-domain, no user simulator, the episode module's own
observed text / task type / instructions / rendering. A subclass names its module and
plays one episode. :class:`FilePlayer` is the shared part of their simulated players."""

from __future__ import annotations

from typing import Any

from edv_ray.envs.protocol import BenchmarkFigures, EpisodeOutcome, ExperienceFn


def model_text(binding, messages) -> str:
    """The benchmark-neutral ``complete(messages) -> str`` over an agent's binding."""
    return binding.complete(messages).content or ""


class FileEnv:
    name = ""
    task_noun = "task"
    episodes: Any = None  # the benchmark's episode module
    termination = "done"

    def task_type(self, bench, domain: str, task) -> str:
        return self.episodes.task_type(task)

    def needs_user_simulator(self, bench, task) -> bool:
        return False

    def policy(self, bench, domain: str) -> str:
        return self.episodes.instructions()

    def observed_text(self, bench, task, messages: list[dict[str, Any]]) -> str:
        return self.episodes.observed_text(task)

    def pre_episode_text(self, bench, task) -> str | None:
        return self.episodes.observed_text(task)  # the task text is there from the start

    def render_trajectory(self, messages: list[dict[str, Any]], max_chars: int) -> str:
        return self.episodes.render_trajectory(messages, max_chars)

    def warm_up(self, bench, domain: str) -> None:
        """Nothing to build per domain: the data files load (cached) with the first task."""

    def play(self, bench, spec, task, complete, experiences: list[str]):
        raise NotImplementedError

    def scoring_figures(self, bench, details: list[dict[str, Any]]) -> BenchmarkFigures | None:
        return None

    def run_episode(self, bench, spec, task, agent_binding, user_binding,
                    experiences: ExperienceFn | None) -> EpisodeOutcome:
        observed = self.episodes.observed_text(task)
        exps = experiences(observed) if experiences is not None else []
        out = self.play(bench, spec, task, lambda msgs: model_text(agent_binding, msgs), exps)
        detail = out.to_dict()
        detail.pop("messages", None)
        return EpisodeOutcome(reward=out.reward, success=out.success,
                              termination=self.termination, messages=out.messages,
                              reward_detail=detail, observed_text=observed)


class FilePlayer:
    """The shared part of a file benchmark's ``SimulatedPlayer`` (see
    :mod:`edv_ray.envs.protocol`): its splits loaded before serving, no user simulator,
    outcomes only from run markers. A subclass answers the agent (``agent_message``)."""

    def __init__(self, env: FileEnv) -> None:
        self.env = env

    def warm_up(self, bench) -> None:
        """The test and training splits (25,000 Mind2Web tasks take a minute to parse:
        done while serving, it starved the health probe and the engine was restarted)."""
        for split in dict.fromkeys((bench.split, getattr(bench, "train_split", None))):
            if split is not None:
                self.env.select_tasks(bench, split, None, None)

    def user_message(self, domain: str, task, req: dict[str, Any]) -> dict[str, Any]:
        raise KeyError(f"{self.env.name} has no user simulator")

    def run_outcome(self, domain: str, task, transcript: str) -> bool | None:
        return None
