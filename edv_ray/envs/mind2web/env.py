"""Mind2Web behind the environment protocol (see :mod:`edv_ray.envs.protocol`).

One pseudo-domain ``mind2web``; the Ability-Matrix task type is the website's domain;
an episode is one task played step by step (MindAct multi-choice); ``success`` = every
step succeeds (the task success of Mind2Web), ``reward`` = the task's step success rate;
per-step scores, the task's EA / AF1 / SSR and the metrics mode (official | corrected)
land in the episode's ``reward_json``.
"""

from __future__ import annotations

import functools
import json
import threading

from edv_ray.config import ConfigError
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.file_env import FileEnv
from edv_ray.envs.mind2web import episode as E
from edv_ray.envs.mind2web.data import SPLITS, Mind2WebData
from edv_ray.envs.mind2web.metrics import MODES, StepScore, TaskScore, mean_over_passes
from edv_ray.envs.selection import pick_tasks


@functools.lru_cache(maxsize=4)
def _data(data_dir: str, scores_file: str | None) -> Mind2WebData:
    return Mind2WebData(data_dir, scores_file)


_DATA_LOCK = threading.Lock()  # lru_cache alone lets concurrent first calls each build one


def data_of(bench) -> Mind2WebData:
    try:
        with _DATA_LOCK:
            return _data(bench.data_dir, bench.scores_file)
    except BenchmarkDataError as err:
        raise ConfigError(str(err)) from None


class Mind2WebEnv(FileEnv):
    name = "mind2web"
    task_noun = "web navigation task"
    episodes = E
    termination = "steps_done"

    def select_tasks(self, bench, split: str, task_ids, num_tasks) -> dict[str, list]:
        if split not in SPLITS:
            raise ConfigError(f"Mind2Web has no split {split!r}; splits: {list(SPLITS)}")
        try:
            tasks = data_of(bench).tasks(split)
        except BenchmarkDataError as err:
            raise ConfigError(str(err)) from None
        return pick_tasks({"mind2web": list(tasks)}, lambda t: t.annotation_id, task_ids,
                          num_tasks, f"Mind2Web split {split!r}")

    def task_by_id(self, bench, domain: str, task_id: str, split: str | None = None):
        for s in ([split] if split else SPLITS):
            try:
                return data_of(bench).task(s, task_id)
            except KeyError:
                continue
        raise KeyError(f"Mind2Web task {task_id!r} not found")

    def play(self, bench, spec, task, complete, experiences):
        return E.run_episode(task, complete, experiences, seed=spec.seed or 0,
                             top_k=bench.top_k, previous_k=bench.previous_actions,
                             metrics=bench.metrics)

    def split_figures(self, passes: list[list[tuple[str, str | None]]]) -> dict[str, dict]:
        """The split's figures in both metrics modes from stored episodes: ``passes`` =
        per trial, the (task_id, reward_json) of each task in split order (None = an
        errored episode, counted as one failed step)."""
        def score(task_id: str, detail: str | None) -> TaskScore:
            if not detail:
                return TaskScore(task_id, (StepScore(0.0, 0.0, 0.0, "error"),), False)
            return E.task_score_of(json.loads(detail))

        scored = [[score(t, d) for t, d in p] for p in passes]
        return {mode: mean_over_passes(scored, mode) for mode in MODES}

    def simulated_player(self):
        from edv_ray.envs.mind2web.sim_player import Mind2WebPlayer

        return Mind2WebPlayer(self)


ENV = Mind2WebEnv()
