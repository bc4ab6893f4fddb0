"""The method registry: configs pick a method by name; methods register themselves.

A method is a plug-in (:class:`Method`): a name, its own typed config section (the
top-level config key of the same name), the stages it runs over a ``RunContext``,
optional pool checks, and the DuckDB views it adds — including the rows it contributes
to ``method_results`` (what the method scored on each test task), the one table every
method shares, so runs of any methods can be compared by one query.

``pipeline``, ``config`` and ``runtime`` only ever go through this module. Adding a
method = one module (+ its prompts) that calls :func:`register`, plus its module name
in ``BUILTIN`` (or any module imported before the config is loaded).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel

BUILTIN = (
    "edv_ray.methods.no_memory",
    "edv_ray.methods.edv",
    "edv_ray.methods.router",
    "edv_ray.methods.judge",
    "edv_ray.methods.reasoning_bank",
)

CONSTRUCTION, INFERENCE = "construction", "inference"
AUDIT = "audit"  # instruments (EDV's poison votes): neither construction nor inference
CONTAMINATION = "contamination"  # writing a contamination experiment's wrong twins


def episode_results(method: str, stage: str, label: str | None = None) -> str:
    """``results_sql`` for a method scored on its own episodes of ``stage`` (the ones it
    used, ``method_episodes``); a contaminated condition's rows are labelled
    ``<label>+<condition>``."""
    label = label or method
    return f"""SELECT run_id,
                      '{label}' || CASE WHEN condition = '' THEN '' ELSE '+' || condition END AS method,
                      agent, epoch, domain, task_id, trial, status, success, reward, episode_id
               FROM method_episodes WHERE used_by = '{method}' AND stage = '{stage}'"""


@dataclass(frozen=True)
class Method:
    name: str
    config_cls: type[BaseModel]
    run: Callable[[Any, Any], None]  # (RunContext, section) → None
    # SQL over the run's views giving method_results rows for this method:
    # run_id, method, agent, epoch, domain, task_id, trial, status, success, reward, episode_id
    results_sql: str
    # stage → construction | inference (token accounting); stages not listed: inference
    phases: dict[str, str] = field(default_factory=dict)
    check: Callable[[Any, Any], None] | None = None  # (RunConfig, section) → raise ValueError
    add_views: Callable[[Any, Any], None] | None = None  # (duckdb con, run_dir) → None
    uses_train: bool = True  # reads the training selection (construction / matrix)
    # SQL giving (method, bank, items): experiences the method admitted to memory
    admitted_sql: str | None = None
    has_memory: bool = False  # supports contamination / memory_from
    memory_dir: str | None = None  # memory_from: the source run's folder this method reads
    summary: str = ""


_REGISTRY: dict[str, Method] = {}
_loaded = False


def register(method: Method) -> Method:
    prev = _REGISTRY.get(method.name)
    if prev is not None and prev is not method and prev.run is not method.run:
        raise ValueError(f"method {method.name!r} is registered twice")
    _REGISTRY[method.name] = method
    return method


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)


def known_methods() -> dict[str, Method]:
    _load_builtin()
    return dict(_REGISTRY)


def get_method(name: str) -> Method:
    methods = known_methods()
    if name not in methods:
        raise KeyError(f"unknown method {name!r}; known: {sorted(methods)}")
    return methods[name]
