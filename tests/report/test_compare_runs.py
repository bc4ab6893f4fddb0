"""`edv compare` over real run folders (scripted server): its numbers equal direct DuckDB
queries over the same Parquet files, one row per run; a sweep folder is found by its runs/."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from edv_ray.cli import main
from edv_ray.report.compare import write_report
from edv_ray.report.compare_load import attach
from tests.methods.test_methods import config, run


def direct(run_dir) -> tuple[int, int]:
    files = [str(f) for f in run_dir.glob("episodes/stage=eval/*.parquet")]
    return duckdb.read_parquet(files).aggregate(
        "count(*), count(*) FILTER (WHERE success)").fetchall()[0]


@pytest.mark.slow
def test_compare_equals_direct_parquet_queries(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    a = run(config(server, tmp_path / "a", ["no_memory", "router"]))
    server.agent_modes["good"] = "nothing"  # a second run where every agent fails
    b = run(config(server, tmp_path / "b", "no_memory"))
    out = tmp_path / "cmp"
    cmp = attach([a, b])
    assert [r.label for r in cmp.runs] == ["a/runs/t", "b/runs/t"]  # same folder name: apart
    assert all(c.ok for r in cmp.runs for c in r.checks)
    tables = write_report(cmp.con, out, n_boot=200, runs=cmp.runs, notes=cmp.notes)
    rows = {(r["group"], r["method"], r["agent"], r["domain"]): r for r in tables["main"]}
    for label, folder, want in (("a/runs/t", a, (4, 2)), ("b/runs/t", b, (4, 0))):
        nm = rows[(label, "no_memory", "all", "mock")]
        assert (nm["n"], nm["successes"]) == direct(folder) == want
    router = rows[("a/runs/t", "router", "all", "mock")]
    assert (router["n"], router["successes"]) == (2, 2)
    for f in ("compare.md", "main.csv", "pass_at_1.png", "validity.csv", "runs.csv"):
        assert (out / f).is_file()
    # the CLI over a sweep-like folder (runs/ holding run folders)
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    shutil.copytree(a, sweep / "runs" / "a")
    assert main(["compare", str(sweep), "--boot", "100"]) == 0
    assert "no_memory" in (sweep / "compare" / "compare.md").read_text()
