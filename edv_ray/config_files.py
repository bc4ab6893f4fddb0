"""Run-config files: YAML with ``extends:`` (deep-merged), and the one error a bad config
raises. Used by :mod:`edv_ray.config` (runs) and :mod:`edv_ray.sweep` (sweep files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A user-caused configuration problem (one clear message)."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: dicts recursively (unless ``over`` switches the
    section to another variant by its ``name``), anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        base_value = out.get(key)
        # a section naming another variant (e.g. benchmark.name) replaces, not merges
        # (a benchmark section without a name is τ²-bench's)
        switched = (isinstance(value, dict) and isinstance(base_value, dict) and "name" in value
                    and value["name"] != base_value.get("name", "tau2" if key == "benchmark"
                                                        else value["name"]))
        if isinstance(value, dict) and isinstance(base_value, dict) and not switched:
            out[key] = deep_merge(base_value, value)
        else:
            out[key] = value
    return out


def read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a dict; ``extends: OTHER.yaml`` (relative to the file) is loaded
    first and deep-merged under this file's fields (lists are replaced, not merged)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.resolve() in seen:
        raise ConfigError(f"config {path}: `extends` cycle")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(f"config {path} is not UTF-8 text "
                          f"({err.reason} at byte {err.start})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {path}: expected a mapping at the top level")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    return deep_merge(read_yaml(path.parent / parent, seen + (path.resolve(),)), data)
