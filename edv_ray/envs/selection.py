"""Task selection shared by file-based benchmarks: split → optional ids → first N."""

from __future__ import annotations

from typing import Callable

from edv_ray.config import ConfigError


def pick(tasks: list, id_of: Callable, task_ids: list[str] | None, num_tasks: int | None,
         where: str) -> list:
    if task_ids:
        wanted = set(task_ids)
        tasks = [t for t in tasks if id_of(t) in wanted]
        missing = sorted(wanted - {id_of(t) for t in tasks})
        if missing:
            raise ConfigError(f"task_ids not found in {where}: {missing[:10]}")
    if num_tasks is not None:
        tasks = tasks[:num_tasks]
    if not tasks:
        raise ConfigError(f"no tasks selected in {where}")
    return tasks
