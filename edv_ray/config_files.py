"""Run-config files: YAML with ``extends:`` (deep-merged), and the one error a bad config
raises. Used by :mod:`edv_ray.config` (runs) and :mod:`edv_ray.sweep` (sweep files).

Reading is bounded, so a hostile file is one clear line and never a hang: at most
``MAX_BYTES`` per file, ``MAX_DEPTH`` levels of nesting, ``MAX_ALIASES`` aliases and
``MAX_NODES`` nodes once every alias is expanded (an anchor "bomb" of nine aliases per
level reaches 10⁹ leaves in a few hundred bytes), ``MAX_EXTENDS`` files in one
``extends`` chain. The limits are checked on libyaml's event stream before any object is
built; run configs have tens to hundreds of nodes and a depth below ten."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
MAX_ALIASES = 1_000
MAX_NODES = 100_000
MAX_EXTENDS = 16
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, bounded nesting


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


def _check_shape(text: str, where: str) -> None:
    """Depth, alias count and expanded size from the event stream (no objects built)."""
    sizes: dict[str, int] = {}  # anchor → nodes it expands to
    stack: list[list] = [[None, 0]]  # open collections: [anchor, nodes inside]
    aliases = total = 0
    for ev in yaml.parse(text, Loader=_LOADER):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([ev.anchor, 1])
            total += 1
            if len(stack) - 1 > MAX_DEPTH:
                raise ConfigError(f"{where} nests deeper than {MAX_DEPTH} levels "
                                  f"(line {ev.start_mark.line + 1})")
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
            total += 1
        elif isinstance(ev, yaml.AliasEvent):
            aliases += 1
            anchor, n = None, sizes.get(ev.anchor, 1)
            total += n
            if aliases > MAX_ALIASES:
                raise ConfigError(f"{where} has more than {MAX_ALIASES} YAML aliases")
        else:
            continue
        if anchor is not None:
            sizes[anchor] = n
        stack[-1][1] += n
        if total > MAX_NODES:
            raise ConfigError(f"{where} expands to more than {MAX_NODES:,} YAML nodes "
                              f"(anchors and aliases, line {ev.start_mark.line + 1}): refused")


def load_yaml_file(path: Path, what: str = "config") -> Any:
    """One YAML file, read within the limits above; any problem is a :class:`ConfigError`
    naming the file (``what`` names the kind of file in the message)."""
    where = f"{what} {path}"
    try:
        if not path.is_file():
            raise ConfigError(f"{what} file not found: {path}")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{where} is {size:,} bytes; a config may be at most "
                              f"{MAX_BYTES:,} bytes")
        raw = path.read_bytes()[:MAX_BYTES + 1]  # the file may have grown since
    except OSError as err:
        raise ConfigError(f"{where} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        _check_shape(text, where)
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where} is not valid YAML: {_one_line(err)}") from None
    except RecursionError:  # not reached within MAX_DEPTH; kept as a last guard
        raise ConfigError(f"{where} nests too deeply") from None


def _one_line(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a dict; ``extends: OTHER.yaml`` (relative to the file) is loaded
    first and deep-merged under this file's fields (lists are replaced, not merged)."""
    path = Path(path)
    if path.resolve() in seen:
        raise ConfigError(f"config {path}: `extends` cycle")
    if len(seen) >= MAX_EXTENDS:
        raise ConfigError(f"config {path}: `extends` chain longer than {MAX_EXTENDS} files")
    data = load_yaml_file(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {path}: expected a mapping at the top level")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"config {path}: `extends` must be the name of one config file "
                          f"(a string), not a {type(parent).__name__}")
    if not parent.strip():
        raise ConfigError(f"config {path}: `extends` is empty")
    if not (path.parent / parent).is_file():
        raise ConfigError(f"config {path}: `extends` file {parent} not found "
                          f"(looked for {path.parent / parent})")
    return deep_merge(read_yaml(path.parent / parent, seen + (path.resolve(),)), data)
