"""What a sweep folder keeps between runs of ``edv sweep``.

* ``variants.json``: each variant's run config as the sweep file gave it when the variant
  started. Re-running a sweep whose file (or base config) changed since is an error
  naming the variants and keys that changed — unless ``--accept-changed``: then started
  variants go on with the config they started with (said on the console) and new
  variants run with the new one.
* ``summary.json``: how each variant ended (complete / incomplete / error / interrupted /
  not started), rewritten (atomically) as each one ends: a failure in one variant is
  recorded there and the others go on. Complete variants are skipped when the sweep is
  run again.
* ``models.json``: which server serves each variant's models (see :mod:`.servers`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from edv_ray.config import ConfigError, RunConfig, load_config
from edv_ray.results.settings_history import flat_fields
from edv_ray.sweep.grid import Variant

VARIANTS, SUMMARY = "variants.json", "summary.json"
_MISSING = object()


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is damaged ({type(err).__name__}: {err}); "
                          "restore it or move the sweep folder aside") from None


def run_dir(folder: Path, run_id: str) -> Path:
    return folder / "runs" / run_id


def started(folder: Path, run_id: str) -> bool:
    return (run_dir(folder, run_id) / "config.yaml").is_file()


def changed_keys(old: dict, new: dict) -> list[str]:
    """Dotted keys whose values differ (compared as JSON)."""
    a = flat_fields(json.loads(json.dumps(old, default=str)))
    b = flat_fields(json.loads(json.dumps(new, default=str)))
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


def check_unchanged(path: Path, folder: Path, variants: list[Variant],
                    accept_changed: bool) -> list[str]:
    """What changed since the sweep folder's variants started (``[]``: nothing). Raises
    ConfigError unless ``accept_changed``."""
    stored = read_json(folder / VARIANTS)
    stored = stored if isinstance(stored, dict) else {}
    problems = []
    for v in variants:
        if not started(folder, v.run_id):
            continue
        if v.run_id not in stored:
            problems.append(f"{v.run_id} was started without a record of its config")
            continue
        keys = changed_keys(stored[v.run_id], v.raw)
        if keys:
            more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
            problems.append(f"{v.run_id}: {', '.join(keys[:4])}{more} changed")
    grid = {v.run_id for v in variants}
    gone = sorted(d.name for d in (folder / "runs").glob("*")
                  if d.name not in grid and started(folder, d.name))
    if gone:
        problems.append(f"no longer in the grid: {', '.join(gone)}")
    if problems and not accept_changed:
        raise ConfigError(
            f"sweep {path} changed since {folder} was started: {'; '.join(problems)}. "
            "Use a new sweep_id for the new grid, or --accept-changed to go on (started "
            "variants keep the config they started with)")
    return problems


def effective_config(folder: Path, v: Variant) -> RunConfig:
    """The config a variant runs with: the one it started with, else the grid's."""
    if started(folder, v.run_id):
        try:
            return load_config(run_dir(folder, v.run_id) / "config.yaml")
        except ConfigError as err:
            raise ConfigError(f"variant {v.run_id}: {err}") from None
    return v.config


def record_variants(folder: Path, variants: list[Variant]) -> None:
    """Keep each variant's config as it starts (a started variant keeps its record)."""
    stored = read_json(folder / VARIANTS)
    stored = stored if isinstance(stored, dict) else {}
    for v in variants:
        if not started(folder, v.run_id):
            stored[v.run_id] = v.raw
    write_json(folder / VARIANTS, stored)


def completed(folder: Path) -> set[str]:
    """Variants a previous run of the sweep finished completely."""
    summary = read_json(folder / SUMMARY)
    if not isinstance(summary, dict):
        return set()
    return {rid for rid, o in summary.items()
            if isinstance(o, dict) and o.get("status") == "complete"}
