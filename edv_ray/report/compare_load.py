"""Attach many run folders (or a sweep folder) to ONE DuckDB connection with the views
:mod:`edv_ray.report.compare` reads — each run's own views
(:func:`edv_ray.results.views.connect`) read through DuckDB's relational API and unioned in
Arrow, with the run's LABEL as ``run_id``. No SQL text is ever built from a folder name,
run id or any other value a user controls.

Before anything is unioned, the runs are checked:

* the same run given twice (the same folder, or a copy: same stored run id and the same
  episodes started at the same instants) is refused;
* two different runs whose folders share a name are labelled apart (``a/r1``, ``b/r1``);
* runs over different benchmarks or test-task sets (the ``selection`` table) are refused
  unless ``allow_mixed_tasks`` — then the difference is kept in :attr:`Comparison.notes`
  and printed with the tables;
* each run's validity checks (:func:`edv_ray.report.validity.run_checks`) are kept; a
  failed check refuses the comparison unless ``allow_invalid`` (then it is noted).

A sweep folder holds its runs under ``runs/``; a run made by a sweep holds ``axes.json``
(its values of the sweep's axes). Variants the sweep did not complete are left out, and
said so in the notes (name the run folder directly to compare it anyway).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from edv_ray.config import ConfigError

VIEWS = ("method_results", "token_use", "admitted", "verification", "selection", "uses")
RUN_INFO_SCHEMA = pa.schema([("run_id", pa.string()), ("stored_run_id", pa.string()),
                             ("sweep_id", pa.string()), ("axes_json", pa.string()),
                             ("seed", pa.int64()), ("benchmark", pa.string())])


def is_run_dir(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "pool").is_dir()


def _sweep_outcomes(sweep: Path) -> dict[str, str]:
    """Each variant's outcome from the sweep's ``summary.json`` ({} when it has none)."""
    path = sweep / "summary.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{shown(path)} is damaged ({type(err).__name__}); restore it or "
                          "name the complete run folders directly") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{shown(path)}: expected a JSON object of variant outcomes")
    return {str(k): str((v or {}).get("status", "")) if isinstance(v, dict) else ""
            for k, v in data.items()}


def run_dirs(paths: list[str | Path], notes: list[str] | None = None) -> list[Path]:
    """Run folders named directly, or found under a sweep folder's ``runs/``. A sweep's
    variants that did not complete (its ``summary.json``: error, interrupted, ...) are
    left out, each named in ``notes``; a run folder named directly is always kept."""
    out: list[Path] = []
    for p in map(Path, paths):
        if is_run_dir(p):
            out.append(p)
        elif (p / "runs").is_dir():
            found = sorted(d for d in (p / "runs").iterdir() if is_run_dir(d))
            if not found:
                raise ConfigError(f"sweep folder {shown(p)} has no run folders under runs/")
            outcomes = _sweep_outcomes(p)
            left = [d for d in found if outcomes and outcomes.get(d.name) != "complete"]
            if left and len(left) == len(found):
                raise ConfigError(f"sweep folder {shown(p)}: no variant completed ("
                                  + ", ".join(f"{shown(d.name)}: {outcomes.get(d.name) or 'not started'}"
                                              for d in left[:6]) + ")")
            if left and notes is not None:
                notes.append(f"Left out {len(left)} variant(s) the sweep did not complete: "
                             + ", ".join(f"{shown(d.name)} ({outcomes.get(d.name) or 'not started'})"
                                         for d in left) + ".")
            out += [d for d in found if d not in left]
        else:
            raise ConfigError(f"{shown(p)} is neither an edv run folder (config.yaml + pool/) nor a "
                              "sweep folder (runs/)")
    if not out:
        raise ConfigError("no run folders given")
    return out


@dataclass
class RunInfo:
    """One run of the comparison. ``label`` is unique and is its ``run_id`` in every view."""

    path: Path
    label: str
    stored_run_id: str
    benchmark: str
    seed: int | None
    axes: dict
    sweep_id: str | None
    tasks: frozenset  # (domain, task_id) of its test selection
    tasks_from: str  # "selection" | "results" (a run without a selection table)
    fingerprint: int | None
    checks: list = field(default_factory=list)

    @property
    def axes_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.axes.items())


@dataclass
class Comparison:
    con: duckdb.DuckDBPyConnection
    runs: list[RunInfo]
    notes: list[str]  # what was allowed by a flag, printed with the tables


def shown(path) -> str:
    """A path as one line of text (control characters escaped)."""
    s = str(path)
    return s if s.isprintable() else s.encode("unicode_escape").decode("ascii")


def labels_for(paths: list[Path]) -> list[str]:
    """The shortest unique trailing path of each folder: ``r1``; ``a/r1`` and ``b/r1``
    when two folders share the name ``r1``."""
    parts = [p.resolve().parts for p in paths]
    depth = [1] * len(paths)
    while True:
        labels = ["/".join(pp[-k:]) for pp, k in zip(parts, depth)]
        clash = {lab for lab in labels if labels.count(lab) > 1}
        if not clash:
            return labels
        grown = False
        for i, lab in enumerate(labels):
            if lab in clash and depth[i] < len(parts[i]):
                depth[i] += 1
                grown = True
        if not grown:
            return [str(p.resolve()) for p in paths]


def _rows(con, view: str) -> pa.Table:
    """A whole view as Arrow (the relational API: the view name is one of ours)."""
    return con.table(view).to_arrow_table()


def _with_label(table: pa.Table, label: str) -> pa.Table:
    if "run_id" in table.column_names:
        table = table.drop_columns(["run_id"])
    return table.add_column(0, "run_id", pa.array([label] * table.num_rows, pa.string()))


def _token_use(con) -> pa.Table:
    """token_use with the columns compare reads (``epoch``, ``shared`` added as NULL /
    false where a run's views lack them)."""
    t = _rows(con, "token_use")
    if "epoch" not in t.column_names:
        t = t.append_column("epoch", pa.nulls(t.num_rows, pa.int32()))
    if "shared" not in t.column_names:
        t = t.append_column("shared", pa.array([False] * t.num_rows, pa.bool_()))
    return t


VERIFICATION_SCHEMA = pa.schema([("method", pa.string()), ("votes", pa.int64()),
                                 ("approvals", pa.int64()), ("votes_all_failed", pa.int64()),
                                 ("approvals_all_failed", pa.int64())])


def _verification(con) -> pa.Table:
    """Per method with votes (``Method.votes_view``, its non-poison votes): votes,
    approvals, and those whose supporting runs all failed."""
    from edv_ray.report.method_facts import methods

    have = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() UNION ALL "
                                      "SELECT table_name FROM duckdb_tables()").fetchall()}
    parts = []
    for name, m in methods().items():
        if m.votes_view is None or m.votes_view not in have:
            continue
        t = con.table(m.votes_view).filter("NOT is_poison").aggregate(
            "count(*) AS votes, count(*) FILTER (WHERE approve) AS approvals, "
            "count(*) FILTER (WHERE supporting_all_failed) AS votes_all_failed, "
            "count(*) FILTER (WHERE supporting_all_failed AND approve) AS approvals_all_failed"
        ).to_arrow_table()
        t = t.add_column(0, "method", pa.array([name] * t.num_rows, pa.string()))
        parts.append(t.cast(VERIFICATION_SCHEMA))
    return pa.concat_tables(parts) if parts else VERIFICATION_SCHEMA.empty_table()


def _fingerprint(con) -> int | None:
    """Identifies a run's episodes: their ids and start instants (a copy of a run folder
    has the same; two real runs never start every episode at the same instant)."""
    rel = con.table("episode_attempts")
    if not rel.shape[0]:
        return None
    return rel.aggregate("hash(list(episode_id || ':' || coalesce(CAST(started_at AS VARCHAR), "
                         "'') ORDER BY episode_id, attempt)) AS h").fetchall()[0][0]


def _read_run(path: Path, label: str) -> tuple[RunInfo, dict[str, pa.Table]]:
    from edv_ray.config_files import read_yaml
    from edv_ray.report.validity import run_checks
    from edv_ray.results.views import connect

    cfg = read_yaml(path / "config.yaml")
    bench = cfg.get("benchmark") or {}
    axes_file = path / "axes.json"
    axes = json.loads(axes_file.read_text(encoding="utf-8")) if axes_file.is_file() else {}
    if not isinstance(axes, dict):
        raise ConfigError(f"{shown(axes_file)}: expected a JSON object of axis values")
    sweep_id = axes.pop("_sweep_id", None)
    con = connect(path)
    try:
        sel = con.table("selection").filter("selection = 'test'").select("domain, task_id")
        tasks, source = frozenset(sel.fetchall()), "selection"
        if not tasks:
            tasks = frozenset(con.table("method_results").select("domain, task_id").fetchall())
            source = "results"
        tables = {"method_results": _rows(con, "method_results"), "token_use": _token_use(con),
                  "admitted": _rows(con, "admitted"), "verification": _verification(con),
                  "selection": _rows(con, "selection"), "uses": _rows(con, "uses")}
        info = RunInfo(path=path, label=label, stored_run_id=str(cfg.get("run_id") or path.name),
                       benchmark=str(bench.get("name", "tau2")), seed=cfg.get("seed"),
                       axes=axes, sweep_id=sweep_id, tasks=tasks, tasks_from=source,
                       fingerprint=_fingerprint(con), checks=run_checks(path, con))
    finally:
        con.close()
    return info, {v: _with_label(t, label) for v, t in tables.items()}


def _refuse_twice(runs: list[RunInfo]) -> None:
    seen: dict = {}
    for r in runs:
        for key in (("path", r.path.resolve()),
                    ("copy", r.stored_run_id, r.fingerprint) if r.fingerprint else None):
            if key is None:
                continue
            if key in seen:
                what = "given twice" if key[0] == "path" else "the same run twice (a copy)"
                raise ConfigError(f"{what}: {shown(seen[key].path)} and {shown(r.path)} (run id "
                                  f"{r.stored_run_id!r}); each run may appear once")
            seen[key] = r


def _task_sets(runs: list[RunInfo], allow: bool) -> list[str]:
    kinds = {}
    for r in runs:
        kinds.setdefault((r.benchmark, r.tasks), []).append(r.label)
    if len(kinds) < 2:
        return []
    desc = "; ".join(f"{shown(', '.join(labels))}: {bench}, {len(tasks)} test tasks"
                     for (bench, tasks), labels in kinds.items())
    if not allow:
        raise ConfigError(f"runs over different benchmarks or test-task sets ({desc}) — "
                          "pass --allow-mixed-tasks to compare them anyway (paired "
                          "differences then use the shared tasks only)")
    return [f"Runs over DIFFERENT benchmarks or test-task sets (--allow-mixed-tasks): {desc}. "
            "Paired differences use only the tasks both sides scored."]


def _validity(runs: list[RunInfo], allow: bool) -> list[str]:
    bad = [(r, c) for r in runs for c in r.checks if not c.ok]
    if not bad:
        return []
    desc = "; ".join(f"{shown(r.label)}: {c.name}{' (' + c.method + ')' if c.method else ''} "
                     f"{shown(c.figure)}" for r, c in bad[:6])
    if not allow:
        raise ConfigError(f"{len(bad)} validity check(s) failed ({desc}) — pass "
                          "--allow-invalid to compare anyway")
    return [f"INVALID: {len(bad)} validity check(s) failed and were overridden with "
            f"--allow-invalid ({desc})."]


def attach(paths: list[str | Path], allow_mixed_tasks: bool = False,
           allow_invalid: bool = False) -> Comparison:
    """The runs under ``paths`` on one connection (see the module doc for the checks)."""
    left_out: list[str] = []
    from edv_ray.results.integrity import DamagedTable, damage, damage_message

    dirs = run_dirs(paths, left_out)
    infos, parts = [], {v: [] for v in VIEWS}
    for path, label in zip(dirs, labels_for(dirs)):
        try:
            info, tables = _read_run(path, label)
        except (duckdb.Error, OSError, ValueError) as err:
            bad = damage(path) if isinstance(err, (duckdb.Error, DamagedTable)) else []
            if bad:  # cut short or mistyped: name the file, not DuckDB's binder
                raise ConfigError(shown(damage_message(path, bad))) from None
            if isinstance(err, ConfigError):  # e.g. its config.yaml: one line, not a YAML dump
                raise ConfigError(" ".join(str(err).split())[:400]) from None
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"{shown(path)}: cannot read the run ({shown(first)[:200]})") from None
        infos.append(info)
        for v, t in tables.items():
            parts[v].append(t)
    _refuse_twice(infos)
    notes = left_out + _task_sets(infos, allow_mixed_tasks) + _validity(infos, allow_invalid)
    out = duckdb.connect()
    for v, ts in parts.items():
        out.register(f"_{v}", pa.concat_tables(ts, promote_options="permissive"))
        out.table(f"_{v}").create_view(v)
    info_rows = [{"run_id": r.label, "stored_run_id": r.stored_run_id, "sweep_id": r.sweep_id,
                  "axes_json": json.dumps(r.axes, sort_keys=True), "benchmark": r.benchmark,
                  "seed": r.seed if isinstance(r.seed, int) else None} for r in infos]
    out.register("_run_info", pa.Table.from_pylist(info_rows, schema=RUN_INFO_SCHEMA))
    out.table("_run_info").create_view("run_info")
    return Comparison(out, infos, notes)
