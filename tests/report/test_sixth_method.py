"""A sixth method declared only in its own module (``tests/fixtures/toy_method.py``,
loaded through ``EDV_PLUGINS``) appears in the run tables, ``edv compare`` (Markdown and
CSV), the validity table (its declared check runs), the memory audit (its declared
items are sampled) and ``edv view`` (its memory listed, each item's sources, the episodes
it noted and its own report table) — with no edit under ``edv_ray/report`` or
``edv_ray/view`` (issue 30 item 4). Scripted server, real Ray, τ²-bench mock grading, real
Parquet/DuckDB, the viewer's app over HTTP (starlette's TestClient)."""

from __future__ import annotations

import csv
import importlib
import json
import os

import pytest
from rich.console import Console
from starlette.testclient import TestClient

from edv_ray import plugins
from edv_ray.report import memory_audit as MA
from edv_ray.report.compare import write_report
from edv_ray.report.compare_load import attach
from edv_ray.report.tables import report
from edv_ray.report.validity import run_checks
from edv_ray.view.app import make_app
from tests.methods.test_methods import config, run
from tests.view.test_app import Page

TOY = "tests.fixtures.toy_method"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv(plugins.PLUGINS_ENV, TOY)
    assert TOY in plugins.extra_modules()
    assert "toy_sixth" in plugins.method_names()  # the env var loads it, no import by hand
    return importlib.import_module(TOY)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_sixth_method_in_every_report(server, toy, tmp_path):
    server.agent_modes["bad"] = "nothing"
    run_dir = run(config(server, tmp_path, ["no_memory", "toy_sixth"], toy_sixth={"note": "hint"}))

    # run tables: the shared method_results (one picked row per task: agent "bad")
    results = report(run_dir, console=Console(quiet=True), save=True)
    rows = [r for name, rs in results.items() if name != "validity" for r in rs
            if isinstance(r, dict) and r.get("method") == "toy_sixth"]
    assert rows, sorted(results)
    assert results["toy_picks"] == [{"agent": "bad", "picked": 2}]  # its own declared table
    assert (run_dir / "report" / "toy_picks.csv").is_file()

    # validity: its declared check ran (and the generic ones know it picks)
    checks = {(c.name, c.method): c for c in run_checks(run_dir)}
    assert checks[(toy.CHECK, "toy_sixth")].ok, checks[(toy.CHECK, "toy_sixth")]
    scored = checks[("tasks_scored", "toy_sixth")]
    assert scored.ok and "one picked result per trial" in scored.detail
    assert any(r["name"] == toy.CHECK for r in results["validity"])

    # edv compare: its row in the Markdown and the CSVs, in its declared order
    # (report_order 25: after no_memory (0)), compared with the declared baseline
    cmp = attach([run_dir])
    out = tmp_path / "cmp"
    tables = write_report(cmp.con, out, n_boot=50, runs=cmp.runs, notes=cmp.notes)
    md = (out / "compare.md").read_text()
    assert "toy_sixth" in md and md.index("toy_sixth") > md.index("no_memory")
    main = list(csv.DictReader((out / "main.csv").open()))
    assert [r["method"] for r in main if r["agent"] == "all"] == ["no_memory", "toy_sixth"]
    # picking: one row for toy_sixth (no per-agent rows); no_memory per agent
    assert {r["agent"] for r in main if r["method"] == "toy_sixth"} == {"all"}
    assert {r["agent"] for r in main if r["method"] == "no_memory"} == {"all", "bad", "good"}
    validity = list(csv.DictReader((out / "validity.csv").open()))
    assert any(r["name"] == toy.CHECK and r["method"] == "toy_sixth" for r in validity)
    assert any(r["method"] == "toy_sixth" for r in tables["tokens"])

    # audit: its declared items collected and sampled
    items = MA.collect_items(run_dir)
    mine = [i for i in items if i.method == "toy_sixth"]
    assert len(mine) == 2 and all(i.text.startswith("hint: 2 run(s)") for i in mine)
    sampled = MA.sample_items(items, per_method=1, seed=0)
    assert [i.bank for i in sampled if i.method == "toy_sixth"] == ["toy"]

    # edv view: its notes in the memory list, each with the runs it counted; an episode
    # it counted links back to its note; its report table on the overview
    notes = {n["item_id"]: n for n in json.loads(toy.memory_file(run_dir).read_text())}
    with TestClient(make_app([run_dir])) as client:
        listed = Page(client.get("/memory?method=toy_sixth").text).find("tr", cls="memory-item")
        assert {(a["data-item-id"], a["data-kind"]) for a in listed} == {(i, "note") for i in notes}
        assert Page(client.get("/").text).find("a", cls="method-memory", href="/memory?method=toy_sixth")
        item_id, note = sorted(notes.items())[0]
        html = client.get(f"/memory/{item_id}").text
        page = Page(html)
        assert page.find(id="admitted")[0]["data-admitted"] == "toy"
        assert {a["data-episode-id"] for a in page.find("a", cls="source-episode")} == set(note["episode_ids"])
        assert toy.NOTE_PROVENANCE in html
        episode = Page(client.get(page.find("a", cls="source-episode")[0]["href"]).text)
        assert [a["data-item-id"] for a in episode.find("a", cls="evidence-item")] == [item_id]
        assert 'id="table-toy_picks"' in client.get("/").text


def test_env_var_names_extra_plugin_modules(monkeypatch):
    monkeypatch.setenv(plugins.PLUGINS_ENV, f" {TOY} , ,")
    assert plugins.extra_modules() == (TOY,)
    monkeypatch.delenv(plugins.PLUGINS_ENV)
    assert plugins.extra_modules() == ()
    assert os.environ.get(plugins.PLUGINS_ENV) is None
