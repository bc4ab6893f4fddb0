"""``edv compare``: statistics and tables over many runs attached to ONE DuckDB connection
(:func:`edv_ray.report.compare_load.attach` builds it and checks the runs).

Contract — the views the connection must have (every run unioned, ``run_id`` = the run's
unique label):

  method_results(run_id, method, agent, epoch INT, domain, task_id, trial INT,
                 status /* ok|error */, success BOOLEAN /* NULL on error */, reward)
      one row per (run, method, agent, epoch, test task, trial): what the method scored.
      ``agent`` is the solver (EDV / Router: the routed agent; Judge: the picked agent;
      No-Memory and ReasoningBank: each pool model — these per-model methods get a row per
      agent AND a pooled ``all`` row). Errored episodes count as FAILURES in every Pass@1.
  token_use(run_id, method, phase /* construction|inference */, stage, epoch INT, role,
            agent, model, calls, prompt_tokens, completion_tokens, shared BOOLEAN)
      ``shared``: the tokens of episodes another method also used, charged here in full.
  admitted(run_id, method, bank, items)   experiences admitted to memory
  uses(run_id, method, stage, epoch, episode_id, memory_key)   episodes each method used
  run_info(run_id, stored_run_id, sweep_id, axes_json, seed, benchmark)
  verification(run_id, votes, approvals, votes_all_failed, approvals_all_failed)  (optional)

Rows are UNITS: one per (run, method, agent) — or, with ``pool=True``, per group of runs
equal but for their seed, the table saying which runs were pooled. Scope: each (run,
method) at its LAST epoch (``epoch=`` an int, or None for every epoch), for scores and
tokens alike. Cells: :mod:`edv_ray.report.compare_units`; verdicts: paired comparisons
only (:mod:`edv_ray.report.compare_tables`); tokens: :mod:`edv_ray.report.compare_tokens`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from edv_ray.config import ConfigError
from edv_ray.report import compare_plots as plots
from edv_ray.report import compare_tables as t
from edv_ray.report.compare_md import AXIS_FIXED, CURVES, markdown
from edv_ray.report.compare_tokens import token_tables
from edv_ray.report.compare_units import Scored
from edv_ray.results.parquet_io import write_text_atomic


def compare_tables(con, epoch="last", baseline: str | None = None, per_model=None,
                   n_boot: int = 10_000, seed: int = 0, pool: bool = False) -> dict:
    """Every table of the comparison, as name → list of row dicts."""
    if n_boot < 1:
        raise ConfigError(f"--boot {n_boot}: the bootstrap needs at least 1 resample "
                          "(10,000 is the default)")
    s = Scored(con, epoch, per_model, pool)
    tables = {
        "main": t.main_table(s, baseline, n_boot, seed),
        "pass_hat_k": t.pass_hat_k_table(s),
        "pairs": t.pairs_table(s, n_boot, seed),
        **token_tables(con, s),
        "heterogeneity": t.heterogeneity_table(s, t.votes_by_run(con)),
        "curve_epoch": t.curve_epoch(con, pool, per_model),
    }
    for name, (axis, _, _) in CURVES.items():
        if axis:
            tables[name] = t.curve_axis(s, axis)
    tables["_groups"] = s.groups
    tables["_left_out"] = s.left_out
    return tables


def write_csv(rows: list[dict], path: Path) -> None:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in cols})
    write_text_atomic(path, buf.getvalue())


def out_folder(out_dir: str | Path) -> Path:
    """The output folder, made if missing; a path that is a file is one clear error."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot make the folder ({err.strerror})") from None
    return out


def write_report(con, out_dir: str | Path, epoch="last", baseline: str | None = None,
                 per_model=None, n_boot: int = 10_000, seed: int = 0,
                 pool: bool = False, runs=(), notes=()) -> dict:
    """Write ``compare.md``, one CSV per non-empty table and the PNG plots into ``out_dir``;
    return the tables (name → rows). ``runs`` / ``notes``: from
    :class:`edv_ray.report.compare_load.Comparison` (the runs table, validity checks and
    what a flag allowed)."""
    tables = compare_tables(con, epoch, baseline, per_model, n_boot, seed, pool)
    out = out_folder(out_dir)
    groups = tables.pop("_groups")
    left_out = tables.pop("_left_out")
    notes = list(notes) + ([f"Methods without a result at epoch {epoch} are left out: "
                            f"{', '.join(left_out)}."] if left_out else [])
    tables["runs"] = [{"run": r.label, "run_id": r.stored_run_id, "path": str(r.path),
                       "benchmark": r.benchmark, "seed": r.seed, "test_tasks": len(r.tasks),
                       "tasks_from": r.tasks_from, "axes": r.axes_text} for r in runs]
    tables["validity"] = [{"run": r.label, **c.row()} for r in runs for c in r.checks]
    for name, rows in tables.items():
        if rows:
            write_csv(rows, out / f"{name}.csv")
    pngs = {}
    if plots.plot_main(tables["main"], out / "pass_at_1.png"):
        pngs["main"] = "pass_at_1.png"
    for name, (_, title, xlabel) in CURVES.items():
        if plots.plot_curve(tables[name], out / f"{name}.png", title, xlabel):
            pngs[name] = f"{name}.png"
    for axis in sorted({k for r in tables["heterogeneity"] for k in r} - AXIS_FIXED):
        rows = [{**r, "x": r.get(axis), "line": r["method"]} for r in tables["heterogeneity"]]
        name = f"heterogeneity_{axis}"
        if plots.plot_curve(rows, out / f"{name}.png", f"Pass@1 vs {axis} (sweep axis)", axis):
            pngs[name] = f"{name}.png"
    write_text_atomic(out / "compare.md", markdown(tables, pngs, groups, list(notes), epoch,
                                                   n_boot, per_model, pool))
    return tables
