"""Mind2Web behind the environment protocol (see :mod:`edv_ray.envs.protocol`).

One pseudo-domain ``mind2web``; the Ability-Matrix task type is the website's domain;
an episode is one task played step by step (MindAct multi-choice); ``success`` = every
step succeeds (the task success of Mind2Web), ``reward`` = the task's step success rate;
per-step scores and the task's EA / AF1 / SSR land in the episode's ``reward_json``.
"""

from __future__ import annotations

import functools
from typing import Any

from edv_ray.config import ConfigError
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mind2web import episode as E
from edv_ray.envs.mind2web.data import SPLITS, Mind2WebData
from edv_ray.envs.protocol import EpisodeOutcome, ExperienceFn
from edv_ray.envs.selection import model_text, pick


@functools.lru_cache(maxsize=4)
def _data(data_dir: str, scores_file: str | None) -> Mind2WebData:
    return Mind2WebData(data_dir, scores_file)


def data_of(bench) -> Mind2WebData:
    try:
        return _data(bench.data_dir, bench.scores_file)
    except BenchmarkDataError as err:
        raise ConfigError(str(err)) from None


class Mind2WebEnv:
    name = "mind2web"
    task_noun = "web navigation task"

    def select_tasks(self, bench, split: str, task_ids, num_tasks) -> dict[str, list]:
        if split not in SPLITS:
            raise ConfigError(f"Mind2Web has no split {split!r}; splits: {list(SPLITS)}")
        try:
            tasks = data_of(bench).tasks(split)
        except BenchmarkDataError as err:
            raise ConfigError(str(err)) from None
        return {"mind2web": pick(list(tasks), lambda t: t.annotation_id, task_ids, num_tasks,
                                 f"Mind2Web/{split}")}

    def task_by_id(self, bench, domain: str, task_id: str, split: str | None = None):
        for s in ([split] if split else SPLITS):
            for t in data_of(bench).tasks(s):
                if t.annotation_id == task_id:
                    return t
        raise KeyError(f"Mind2Web task {task_id!r} not found")

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
                            seed=spec.seed or 0, top_k=bench.top_k,
                            previous_k=bench.previous_actions)
        detail = out.to_dict()
        detail.pop("messages", None)
        return EpisodeOutcome(reward=out.reward, success=out.success, termination="steps_done",
                              messages=out.messages, reward_detail=detail, observed_text=observed)


ENV = Mind2WebEnv()
