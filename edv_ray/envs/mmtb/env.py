"""MMTB behind the environment protocol (see :mod:`edv_ray.envs.protocol`).

One pseudo-domain ``mmtb``; an episode is one multi-mission dialogue; ``success`` =
every mission correct, ``reward`` = the share of missions correct; the per-mission
verdicts and the dialogue's breakdown land in the episode's ``reward_json``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from edv_ray.config import ConfigError
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mmtb import episode as E
from edv_ray.envs.mmtb import metrics as M
from edv_ray.envs.mmtb.data import SPLITS, load_dialogues, select
from edv_ray.envs.file_env import FileEnv
from edv_ray.envs.protocol import BenchmarkFigures
from edv_ray.envs.selection import pick_tasks


@functools.lru_cache(maxsize=4)
def _dialogues(data_dir: str, language: str) -> tuple:
    return tuple(load_dialogues(data_dir, language))


_DATA_LOCK = threading.Lock()  # concurrent first calls load the data once, not once each


def dialogues_of(bench) -> tuple:
    try:
        with _DATA_LOCK:
            return _dialogues(bench.data_dir, bench.language)
    except BenchmarkDataError as err:
        raise ConfigError(str(err)) from None


class MMTBEnv(FileEnv):
    name = "mmtb"
    task_noun = "multi-mission tool-use dialogue"
    episodes = E
    termination = "missions_done"

    def select_tasks(self, bench, split: str, task_ids, num_tasks) -> dict[str, list]:
        try:
            import jieba  # noqa: F401 - the official ROUGE tokens (envs/mmtb/arguments.py)
        except ImportError:
            raise ConfigError("MMTB scoring needs jieba==0.42.1 (pip install jieba==0.42.1; "
                              "it is a pinned dependency of edv-ray)") from None
        if split not in SPLITS:
            raise ConfigError(f"MMTB has no split {split!r}; splits: {list(SPLITS)}")
        ds = select(list(dialogues_of(bench)), split, bench.train_fraction)
        return pick_tasks({"mmtb": ds}, lambda d: d.id, task_ids, num_tasks, f"MMTB split {split!r}")

    def task_by_id(self, bench, domain: str, task_id: str, split: str | None = None):
        for d in dialogues_of(bench):
            if d.id == task_id:
                return d
        raise KeyError(f"MMTB dialogue {task_id!r} not found")

    def play(self, bench, spec, task, complete, experiences):
        return E.run_episode(task, complete, experiences, seed=spec.seed or 0,
                             metrics=bench.metrics)

    def scoring_figures(self, bench, details: list[dict[str, Any]]) -> BenchmarkFigures:
        """The nine figures over every mission of the episodes (micro, as the official
        analysis), in the run's metrics mode, with what they mean in it."""
        results = [r for d in details for r in M.stored_results(d)]
        return BenchmarkFigures(M.figure_line(bench.metrics, M.breakdown(results)),
                                M.meaning(bench.metrics))

    def simulated_player(self):
        from edv_ray.envs.mmtb.sim_player import MMTBPlayer

        return MMTBPlayer(self)


ENV = MMTBEnv()
