"""MMTB behind the environment protocol (see :mod:`edv_ray.envs.protocol`).

One pseudo-domain ``mmtb``; an episode is one multi-mission dialogue; ``success`` =
every mission correct, ``reward`` = the share of missions correct; the per-mission
verdicts and the dialogue's breakdown land in the episode's ``reward_json``.
"""

from __future__ import annotations

import functools
from typing import Any

from edv_ray.config import ConfigError
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mmtb import episode as E
from edv_ray.envs.mmtb.data import SPLITS, load_dialogues, select
from edv_ray.envs.protocol import EpisodeOutcome, ExperienceFn
from edv_ray.envs.selection import model_text, pick


@functools.lru_cache(maxsize=4)
def _dialogues(data_dir: str, language: str) -> tuple:
    return tuple(load_dialogues(data_dir, language))


def dialogues_of(bench) -> tuple:
    try:
        return _dialogues(bench.data_dir, bench.language)
    except BenchmarkDataError as err:
        raise ConfigError(str(err)) from None


class MMTBEnv:
    name = "mmtb"
    task_noun = "multi-mission tool-use dialogue"

    def select_tasks(self, bench, split: str, task_ids, num_tasks) -> dict[str, list]:
        if split not in SPLITS:
            raise ConfigError(f"MMTB has no split {split!r}; splits: {list(SPLITS)}")
        ds = select(list(dialogues_of(bench)), split, bench.train_fraction)
        return {"mmtb": pick(ds, lambda d: d.id, task_ids, num_tasks, f"MMTB/{split}")}

    def task_by_id(self, bench, domain: str, task_id: str, split: str | None = None):
        for d in dialogues_of(bench):
            if d.id == task_id:
                return d
        raise KeyError(f"MMTB dialogue {task_id!r} not found")

    def task_type(self, bench, domain: str, task) -> str:
        return E.task_type(task)

    def needs_user_simulator(self, bench, task) -> bool:
        return False

    def policy(self, bench, domain: str) -> str:
        return E.instructions()

    def observed_text(self, bench, task, messages: list[dict[str, Any]]) -> str:
        return E.observed_text(task)

    def render_trajectory(self, messages: list[dict[str, Any]], max_chars: int) -> str:
        return E.render_trajectory(messages, max_chars)

    def run_episode(self, bench, spec, task, agent_binding, user_binding,
                    experiences: ExperienceFn | None) -> EpisodeOutcome:
        observed = E.observed_text(task)
        exps = experiences(observed) if experiences is not None else []
        out = E.run_episode(task, lambda msgs: model_text(agent_binding, msgs), exps,
                            seed=spec.seed or 0)
        detail = out.to_dict()
        detail.pop("messages", None)
        return EpisodeOutcome(reward=out.reward, success=out.success,
                              termination="missions_done", messages=out.messages,
                              reward_detail=detail, observed_text=observed)


ENV = MMTBEnv()
