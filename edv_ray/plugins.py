"""The plug-in table (base layer): which methods exist, and where their pieces live.

A method is known here by name as strings, never by import: its typed config section
(``"module:Class"`` of a pydantic-only module), its optional pool check (``"module:function"``,
``(RunConfig, section) → raise ValueError``, in the same light module) and whether it keeps a
memory (``contamination`` / ``memory_from`` need one). :mod:`edv_ray.config` validates a run
config through :func:`config_class` / :func:`check_section` alone, so loading a config loads
the config modules and nothing of the run (no litellm, Ray, pyarrow).

The methods themselves (:class:`edv_ray.methods.registry.Method`: stages, views, SQL) register
through :func:`register` when their module is imported; :func:`known_methods` /
:func:`get_method` import the ``BUILTIN`` modules the first time a run needs them. A method
outside this table (a module imported before the config is loaded, or named in the
``EDV_PLUGINS`` environment variable) is validated through its registered ``Method`` instead.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

# the phase of a method's stage (``Method.phases``; token accounting, test-time seeds)
CONSTRUCTION, INFERENCE = "construction", "inference"
AUDIT = "audit"  # instruments (EDV's poison votes): neither construction nor inference
CONTAMINATION = "contamination"  # writing a contamination experiment's wrong twins

# the modules that register the built-in methods (imported on first use)
BUILTIN = (
    "edv_ray.methods.no_memory",
    "edv_ray.methods.edv.plugin",
    "edv_ray.methods.router",
    "edv_ray.methods.judge",
    "edv_ray.methods.reasoning_bank.plugin",
)


@dataclass(frozen=True)
class MethodPlugin:
    config: str  # "module:Class" — the section's pydantic model, in a module importing no run code
    check: str | None = None  # "module:function" — the pool check, (RunConfig, section) → None
    has_memory: bool = False  # supports contamination / memory_from


_SECTIONS = "edv_ray.methods.sections"
_EDV = "edv_ray.methods.edv.config"
METHODS: dict[str, MethodPlugin] = {
    "no_memory": MethodPlugin(f"{_SECTIONS}:NoMemoryConfig"),
    "edv": MethodPlugin(f"{_EDV}:EDVConfig", f"{_EDV}:check_edv_pool", has_memory=True),
    "edv_blind": MethodPlugin("edv_ray.methods.edv.instance:EDVBlindConfig",
                              f"{_EDV}:check_edv_pool", has_memory=True),
    "router": MethodPlugin(f"{_SECTIONS}:RouterConfig", f"{_SECTIONS}:check_router"),
    "judge": MethodPlugin(f"{_SECTIONS}:JudgeConfig", f"{_SECTIONS}:check_judge"),
    "reasoning_bank": MethodPlugin("edv_ray.methods.reasoning_bank.config:ReasoningBankConfig",
                                   has_memory=True),
}


def resolve(ref: str) -> Any:
    """The object a ``"module:attr"`` string names (importing that module only)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, Any] = {}  # name → edv_ray.methods.registry.Method
_loaded = False


def register(method: Any) -> Any:
    prev = _REGISTRY.get(method.name)
    if prev is not None and prev is not method and prev.run is not method.run:
        raise ValueError(f"method {method.name!r} is registered twice")
    _REGISTRY[method.name] = method
    return method


PLUGINS_ENV = "EDV_PLUGINS"  # comma-separated modules that register more methods


def extra_modules() -> tuple[str, ...]:
    """The modules named by ``EDV_PLUGINS`` (e.g. ``mypkg.my_method``): each registers a
    method when imported, like a built-in one (a sixth method needs no edit here)."""
    return tuple(m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip())


def _load_extra() -> None:
    for module in extra_modules():
        importlib.import_module(module)


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)
    _load_extra()


def known_methods() -> dict[str, Any]:
    """Every registered method (importing the built-in method modules first)."""
    _load_builtin()
    return dict(_REGISTRY)


def get_method(name: str) -> Any:
    _load_builtin()
    if name not in _REGISTRY:  # no copy of the table per lookup (make_spec asks per episode)
        raise KeyError(f"unknown method {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def method_names() -> list[str]:
    """The names a config may use: the table's, plus any method registered so far by a
    module imported before the config is loaded or named by ``EDV_PLUGINS`` (the built-in
    modules are not loaded)."""
    _load_extra()
    return sorted(set(METHODS) | set(_REGISTRY))


def config_class(name: str):
    """The pydantic class of method ``name``'s config section."""
    if name in METHODS:
        return resolve(METHODS[name].config)
    return get_method(name).config_cls


def check_section(cfg: Any, name: str, section: Any) -> None:
    """Method ``name``'s pool checks of ``section`` in run config ``cfg`` (ValueError)."""
    if name in METHODS:
        ref = METHODS[name].check
        check = resolve(ref) if ref else None
    else:
        check = get_method(name).check
    if check is not None:
        check(cfg, section)


def has_memory(name: str) -> bool:
    return METHODS[name].has_memory if name in METHODS else get_method(name).has_memory
