"""A sweep file's grid: its variants, their folder names and their run configs.

Folder names are readable and unique: ``<sweep_id>-<label>-<label>...``, one label per
axis. A label is the axis value itself when it is a short plain name or number (``0.25``,
``edv``, ``qwen_x3``); anything else (a path, a list, a long or punctuated text) becomes
its cleaned-up tail plus six hex digits of a hash of the exact value
(``.../pool-A`` → ``runs_pool-A-3f9c2e``), so values that differ get different folders.
Two variants that would still share a folder — values that only differ in type or
case (``0.25`` and ``"0.25"``, ``A`` and ``a``), or a value listed twice — are an error
before any work: they would run as one (one folder, the second variant's config never
run).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edv_ray.config import ConfigError, RunConfig, load_config_dict
from edv_ray.config_files import deep_merge, read_yaml

MAX_LABEL = 32  # characters of one axis value in a folder name
MAX_RUN_ID = 128  # RunConfig.run_id's limit


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sweep_id: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$")
    output_dir: str = "runs/sweeps"
    base: str | dict[str, Any]
    parallel: int = Field(1, ge=1, le=64)
    axes: dict[str, list[Any] | dict[str, dict[str, Any]]] = Field(min_length=1)


@dataclass(frozen=True)
class Variant:
    """One point of the grid."""

    run_id: str  # its folder name under SWEEP/runs/
    raw: dict[str, Any]  # its run config as the sweep file gives it (before defaults)
    config: RunConfig
    axes: dict[str, Any]  # axis → its value (list axes) or label (named axes)


def _set_path(cfg: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    keys = dotted.split(".")
    out = deep_merge(cfg, {})
    node = out
    for k in keys[:-1]:
        child = node.get(k)
        node[k] = dict(child) if isinstance(child, dict) else {}
        node = node[k]
    node[keys[-1]] = value
    return out


def folder_label(value: Any) -> str:
    """The part of a folder name that stands for one axis value (see the module doc)."""
    exact = json.dumps(value, sort_keys=True, default=str)
    text = value if isinstance(value, str) else (
        exact if isinstance(value, (dict, list)) else str(value))
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    if clean and clean == text and len(clean) <= MAX_LABEL:
        return clean
    digest = hashlib.sha256(exact.encode()).hexdigest()[:6]
    tail = clean[-(MAX_LABEL - 7):].strip("_.-")
    return f"{tail}-{digest}" if tail else digest


def expand(sweep: SweepConfig, base: dict[str, Any]) -> list[tuple[str, dict, dict]]:
    """[(run_id, run config dict, axis values)] for every point of the grid
    (``itertools.product`` of the axes, in file order)."""
    names = list(sweep.axes)
    choices = []
    for name in names:
        vals = sweep.axes[name]
        if not vals:
            raise ConfigError(f"axis {name!r} has no values: the grid would be empty")
        choices.append(list(vals.items()) if isinstance(vals, dict) else [(v, v) for v in vals])
    out = []
    for point in itertools.product(*choices):
        cfg, axes = deep_merge(base, {}), {}
        for name, (label, value) in zip(names, point):
            if isinstance(sweep.axes[name], dict):  # a named override (e.g. a pool)
                cfg = deep_merge(cfg, value)
            else:
                cfg = _set_path(cfg, name, value)
            axes[name] = label
        run_id = "-".join([sweep.sweep_id] + [folder_label(axes[n]) for n in names])
        for mc in (cfg.get("models") or {}).values():
            if isinstance(mc, dict):
                mc["server_per"] = "role"  # one server set per model setting for the sweep
        cfg.update(run_id=run_id, output_dir=str(Path(sweep.output_dir) / sweep.sweep_id / "runs"))
        out.append((run_id, cfg, axes))
    return out


def check_folders(points: list[tuple[str, dict, dict]]) -> None:
    """Every variant gets its own folder (case-insensitive file systems included)."""
    seen: dict[str, dict] = {}
    for run_id, _cfg, axes in points:
        if len(run_id) > MAX_RUN_ID:
            raise ConfigError(
                f"variant {axes!r}: folder name {run_id[:40]}… is longer than {MAX_RUN_ID} "
                "characters; shorten sweep_id or label the axis values (a mapping label → override)")
        other = seen.setdefault(run_id.lower(), axes)
        if other is not axes:
            raise ConfigError(
                f"variants {other!r} and {axes!r} would share the folder {run_id} (their "
                "values look alike as names); label them apart (a mapping label → override)")


def load_sweep(path: str | Path) -> tuple[SweepConfig, list[Variant]]:
    """The sweep file and its variants, every one a valid run config (or one ConfigError
    naming the variant) — before anything is written or started."""
    path = Path(path)
    raw = read_yaml(path)
    try:
        sweep = SweepConfig.model_validate(raw)
    except ValidationError as err:
        lines = [f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
                 for e in err.errors()]
        raise ConfigError(f"invalid sweep {path}: " + "; ".join(lines)) from None
    base = read_yaml(path.parent / sweep.base) if isinstance(sweep.base, str) else sweep.base
    points = expand(sweep, base)
    check_folders(points)
    variants = [Variant(rid, cfg, load_config_dict(cfg, f"{path}, variant {rid}"), axes)
                for rid, cfg, axes in points]
    return sweep, variants
