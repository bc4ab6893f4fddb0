"""Attach many run folders (or a sweep folder) to ONE DuckDB connection with the views
:mod:`edv_ray.report.compare` reads: ``method_results``, ``token_use``, ``admitted`` and
``run_info`` — plus ``verification`` (EDV votes per run: approvals, and those whose
supporting runs all failed) — each run's own views (:func:`edv_ray.results.views.connect`), unioned.

A sweep folder holds ``sweep.yaml`` and its runs under ``runs/``; a run folder made by a
sweep holds ``axes.json`` (its values of the sweep's axes), which becomes ``run_info``.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from edv_ray.config import ConfigError

VIEWS = ("method_results", "token_use", "admitted")


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "pool").is_dir()


def run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run folders named directly, or found under a sweep folder's ``runs/``."""
    out: list[Path] = []
    for p in map(Path, paths):
        if is_run_dir(p):
            out.append(p)
        elif (p / "runs").is_dir():
            found = sorted(d for d in (p / "runs").iterdir() if is_run_dir(d))
            if not found:
                raise ConfigError(f"sweep folder {p} has no run folders under runs/")
            out += found
        else:
            raise ConfigError(f"{p} is neither an edv run folder (config.yaml + pool/) nor a "
                              "sweep folder (runs/)")
    if not out:
        raise ConfigError("no run folders given")
    return out


def attach(paths: list[str | Path]) -> duckdb.DuckDBPyConnection:
    from edv_ray.results.views import connect

    tables: dict[str, list[pa.Table]] = {v: [] for v in VIEWS}
    info = []
    for d in run_dirs(paths):
        con = connect(d)
        run_id = d.name
        for v in VIEWS:
            t = con.sql(f"SELECT '{run_id}' AS run_id, * EXCLUDE (run_id) FROM {v}"
                            if v != "admitted" else
                            f"SELECT '{run_id}' AS run_id, * FROM {v}").to_arrow_table()
            tables[v].append(t)
        tables.setdefault("verification", []).append(con.sql(f"""
            SELECT '{run_id}' AS run_id, count(*) AS votes,
                   count(*) FILTER (WHERE approve) AS approvals,
                   count(*) FILTER (WHERE supporting_all_failed) AS votes_all_failed,
                   count(*) FILTER (WHERE supporting_all_failed AND approve) AS approvals_all_failed
            FROM votes WHERE NOT is_poison""").to_arrow_table())
        axes_file = d / "axes.json"
        axes = json.loads(axes_file.read_text()) if axes_file.is_file() else {}
        info.append({"run_id": run_id, "sweep_id": axes.pop("_sweep_id", None),
                     "axes_json": json.dumps(axes, sort_keys=True)})
        con.close()
    out = duckdb.connect()
    for v, parts in tables.items():
        out.register(f"_{v}", pa.concat_tables(parts, promote_options="default"))
        out.execute(f"CREATE VIEW {v} AS SELECT * FROM _{v}")
    schema = pa.schema([("run_id", pa.string()), ("sweep_id", pa.string()), ("axes_json", pa.string())])
    out.register("_run_info", pa.Table.from_pylist(info, schema=schema))
    out.execute("CREATE VIEW run_info AS SELECT * FROM _run_info")
    return out
