"""Task selection, one rule for every benchmark: each domain's split (in split order) →
the tasks listed in ``task_ids`` → the first ``num_tasks`` per domain."""

from __future__ import annotations

from typing import Callable

from edv_ray.config import ConfigError

SHOWN_IDS = 20  # ids named in an error (then a count of the rest)


def pick_tasks(tasks: dict[str, list], id_of: Callable, task_ids: list[str] | None,
           num_tasks: int | None, where: str) -> dict[str, list]:
    """domain → its selected tasks. ``tasks``: every task of each selected domain's split
    (``where`` names the split in errors). An id in ``task_ids`` that no selected domain
    holds is an error naming it — never skipped — and so is a domain left with no task
    (``[]`` is refused by the config: it would select nothing). ``num_tasks`` caps each
    domain after the ids are checked: an id the cap leaves out is not "not found"."""
    out = dict(tasks)
    if task_ids is not None:
        wanted = set(task_ids)
        out = {d: [t for t in ts if id_of(t) in wanted] for d, ts in out.items()}
        found = {id_of(t) for ts in out.values() for t in ts}
        missing = [i for i in task_ids if i not in found]
        if missing:
            more = f" and {len(missing) - SHOWN_IDS} more" if len(missing) > SHOWN_IDS else ""
            raise ConfigError(f"task_ids not found in {where} ({', '.join(sorted(out))}): "
                              f"{missing[:SHOWN_IDS]}{more}")
    if num_tasks is not None:
        out = {d: ts[:num_tasks] for d, ts in out.items()}
    empty = [d for d, ts in out.items() if not ts]
    if empty:
        why = "none of task_ids is in it" if task_ids is not None else "the split is empty"
        raise ConfigError(f"no tasks selected in {where} for {', '.join(empty)}: {why}")
    return out
