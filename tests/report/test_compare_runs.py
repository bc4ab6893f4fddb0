"""`edv compare` over real run folders (scripted server): its numbers equal direct DuckDB
queries over the same Parquet files; a sweep folder is found by its runs/."""

from __future__ import annotations

import shutil

import duckdb

from edv_ray.cli import main
from edv_ray.report.compare import write_report
from edv_ray.report.compare_load import attach
from tests.methods.test_methods import config, run


def test_compare_equals_direct_parquet_queries(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    a = run(config(server, tmp_path / "a", ["no_memory", "router"]))
    server.agent_modes["good"] = "nothing"  # a second run where every agent fails
    b = run(config(server, tmp_path / "b", "no_memory"))
    out = tmp_path / "cmp"
    tables = write_report(attach([a, b]), out, n_boot=200)
    main_rows = {(r["method"], r["agent"], r["domain"]): r for r in tables["main"]}
    direct = duckdb.sql(f"""
        SELECT count(*), count(*) FILTER (WHERE success)
        FROM read_parquet(['{a}/episodes/**/*.parquet', '{b}/episodes/**/*.parquet'],
                          hive_partitioning=true, union_by_name=true)
        WHERE stage = 'eval'""").fetchall()[0]
    nm = main_rows[("no_memory", "all", "mock")]
    assert (nm["n"], nm["successes"]) == direct == (8, 2)
    assert nm["pass_at_1"] == 2 / 8 and nm["ci_lo"] < 0.25 < nm["ci_hi"]
    router = main_rows[("router", "all", "mock")]
    assert (router["n"], router["successes"]) == (2, 2)
    for f in ("compare.md", "main.csv", "pass_at_1.png"):
        assert (out / f).is_file()
    # the CLI over a sweep-like folder (runs/ holding run folders)
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    shutil.copytree(a, sweep / "runs" / "a")
    assert main(["compare", str(sweep), "--boot", "100"]) == 0
    assert "no_memory" in (sweep / "compare" / "compare.md").read_text()
