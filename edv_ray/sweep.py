"""``edv sweep SWEEP.yaml``: a base run config plus axes, expanded into runs under one
sweep folder that share one set of model servers.

A sweep file::

    sweep_id: hetero-embedded          # the folder name under output_dir
    output_dir: runs/sweeps
    base: ../edv_mock_embedded.yaml    # a run config file (relative to this file) or a mapping
    parallel: 2                        # variants in flight at once (they share the servers)
    axes:
      pool:                            # a named axis: each value is a config override
        qwen_only: {agents: [...], roles: {executors: [...]}}
        mixed: {agents: [...]}
      edv.retrieval_k: [1, 3]          # a dotted config path and its values
      method: [edv, reasoning_bank]
      contamination: [0.0, 0.1]

The grid is the Cartesian product of the axes (``itertools.product``). Every model any
variant uses is served once for the whole sweep (one set of replicas per model, shared
by every agent and variant: ``server_per`` is set to ``role``); each variant is a normal
run folder under ``SWEEP/runs/`` with ``axes.json`` (its axis values — W&B groups and
``edv compare`` columns come from it). Variants run in a thread pool of size
``parallel``; each one fans its episodes out on Ray as any run does. Re-running the same
command resumes: finished variants are skipped, partial ones resumed.
"""

from __future__ import annotations

import itertools
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from edv_ray.config import ConfigError, RunConfig, load_config_dict
from edv_ray.config_files import deep_merge, load_yaml_file, read_yaml


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sweep_id: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$")
    output_dir: str = "runs/sweeps"
    base: str | dict[str, Any]
    parallel: int = Field(1, ge=1, le=64)
    axes: dict[str, list[Any] | dict[str, dict[str, Any]]]


def _set_path(cfg: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    keys = dotted.split(".")
    out = deep_merge(cfg, {})
    node = out
    for k in keys[:-1]:
        node[k] = dict(node.get(k) or {})
        node = node[k]
    node[keys[-1]] = value
    return out


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(value)).strip("_")[:24] or "x"


def expand(sweep: SweepConfig, base: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """[(run_id, run config dict, axis values)] for every point of the grid."""
    names = list(sweep.axes)
    choices = []
    for name in names:
        vals = sweep.axes[name]
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
        run_id = sweep.sweep_id + "-" + "-".join(_slug(axes[n]) for n in names)
        for mc in (cfg.get("models") or {}).values():
            mc["server_per"] = "role"  # one server set per model, shared by all variants
        cfg.update(run_id=run_id, output_dir=str(Path(sweep.output_dir) / sweep.sweep_id / "runs"))
        out.append((run_id, cfg, axes))
    return out


def load_sweep(path: str | Path) -> tuple[SweepConfig, list[tuple[str, RunConfig, dict]]]:
    path = Path(path)
    raw = load_yaml_file(path, "sweep") or {}  # bounded: size, depth, aliases
    try:
        sweep = SweepConfig.model_validate(raw)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as err:
        raise ConfigError(f"invalid sweep {path}: {err}") from None
    base = read_yaml(path.parent / sweep.base) if isinstance(sweep.base, str) else sweep.base
    if not sweep.axes:
        raise ConfigError(f"sweep {path}: `axes` is empty")
    variants = [(rid, load_config_dict(cfg, f"{path} [{rid}]"), axes)
                for rid, cfg, axes in expand(sweep, base)]
    return sweep, variants


def union_config(variants: list[tuple[str, RunConfig, dict]]) -> RunConfig:
    """A config holding every model and agent the variants use (to start servers once)."""
    models, agents, user = {}, {}, None
    for _rid, cfg, _axes in variants:
        models.update({k: v.model_dump() for k, v in cfg.models.items()})
        for a in cfg.agents:
            agents.setdefault(f"{a.model}--{a.name}", a.model_dump() | {"name": f"{a.model}--{a.name}"[:64]})
        user = user or (cfg.roles.user_simulator.model_dump() if cfg.roles.user_simulator else None)
    first = variants[0][1]
    return load_config_dict({"run_id": "sweep", "models": models, "agents": list(agents.values()),
                             "roles": {"user_simulator": user} if user else {},
                             "runtime": first.runtime.model_dump(), "wandb": {"mode": "disabled"}},
                            "<sweep union>")


def run_sweep(path: str | Path, console: Console | None = None, show_progress: bool = True) -> dict:
    """Run (or resume) every variant; returns run_id → RunResult (or the error text)."""
    from edv_ray import pipeline
    from edv_ray.runtime.ray_setup import init_ray
    from edv_ray.runtime.servers import check_models, launch_servers

    console = console or Console()
    sweep, variants = load_sweep(path)
    folder = Path(sweep.output_dir) / sweep.sweep_id
    for _rid, cfg, _axes in variants:
        pipeline.validate(cfg)  # every variant checked before anything starts
    union = union_config(variants)
    check_models(union)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))
    console.print(f"[bold]sweep[/] {sweep.sweep_id}: {len(variants)} variant(s) → {folder}")
    init_ray(union.runtime)
    pool = launch_servers(union, folder, shared=True)
    (folder / "servers.json").write_text(json.dumps([i.model_dump() for i in pool.infos], indent=1))
    results: dict[str, Any] = {}

    def one(item) -> None:
        run_id, cfg, axes = item
        run_dir = Path(cfg.output_dir) / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "axes.json").write_text(json.dumps({"_sweep_id": sweep.sweep_id, **axes}))
        if (run_dir / "config.yaml").exists():
            cfg = pipeline.load_config(run_dir / "config.yaml")  # resume as it was
        try:
            results[run_id] = pipeline.execute(cfg, run_id, run_dir, console=console,
                                               show_progress=show_progress and sweep.parallel == 1,
                                               pool=pool)
        except ConfigError as err:
            results[run_id] = f"error: {err}"

    try:
        with ThreadPoolExecutor(max_workers=sweep.parallel) as ex:
            list(ex.map(one, variants))
    finally:
        pool.stop()
    return results
