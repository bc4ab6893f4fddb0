"""Task selection shared by file-based benchmarks: split → optional ids → first N."""

from __future__ import annotations

from typing import Callable

from edv_ray.config import ConfigError


def pick(tasks: list, id_of: Callable, task_ids: list[str] | None, num_tasks: int | None,
         where: str) -> list:
    if task_ids is not None:  # [] selects nothing (configs refuse it), never everything
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


def keep_end(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` keeping its end (the latest steps), at a line start."""
    if len(text) <= max_chars:
        return text
    tail = text[-max(0, max_chars - 4):]
    cut = tail.find("\n")
    return "[…]\n" + (tail[cut + 1:] if 0 <= cut < len(tail) - 1 else tail)
