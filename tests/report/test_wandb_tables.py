"""W&B Tables of a real scripted-server run (EDV + ReasoningBank, W&B offline): the
``experiences`` and ``episodes`` tables are read back from W&B's offline files and checked
against the run's Parquet (through its DuckDB views)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edv_ray.report import wandb_tables as WT
from edv_ray.results.views import connect
from edv_ray.testing import wandb_log
from tests.methods import scripts
from tests.report.test_tracking import config, offline_log, run


def verifier_bad_rejects(req, tag):
    """Agent ``bad`` rejects every candidate of update_task_1: its items go private."""
    ok = not (tag["agent"] == "bad" and tag["task_id"] == "update_task_1")
    return scripts.reply({"approve": ok, "rationale": "checked"})


def logged_table(run_dir: Path, key: str) -> dict:
    """The table logged under ``key`` (its last step), as W&B wrote it to its files."""
    log = offline_log(run_dir)
    hist = wandb_log.history(list(wandb_log.records(log)))
    step = [h for h in hist if f"{key}/_type" in h][-1]
    assert step[f"{key}/_type"] == "table-file"
    data = json.loads((log.parent / "files" / step[f"{key}/path"]).read_text())
    assert step[f"{key}/nrows"] == len(data["data"])
    return data


@pytest.fixture(scope="module")
def logged(scripted, tmp_path_factory):
    """One run, its two logged tables and its summary (shared by the module's tests)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    try:
        server = scripted
        server.reset()  # module-scoped: whatever the test before left on the shared server goes
        server.agent_modes["bad"] = "nothing"
        server.add_script("distiller", scripts.distiller)
        server.add_script("verifier", verifier_bad_rejects)
        server.add_script("self_judge", scripts.make_self_judge(lambda a: "success"))
        server.add_script("extractor", scripts.extractor)
        run_dir, _ = run(config(server, tmp_path_factory.mktemp("wt"), ["edv", "reasoning_bank"]))
        summary = wandb_log.summary(list(wandb_log.records(offline_log(run_dir))))
        yield (run_dir, logged_table(run_dir, "experiences"), logged_table(run_dir, "episodes"),
               summary)
    finally:
        server.reset()
        mp.undo()


def rows_of(table: dict) -> list[dict]:
    return [dict(zip(table["columns"], r)) for r in table["data"]]


@pytest.mark.slow
def test_experiences_match_the_banks_and_votes(logged):
    run_dir, exp, _, summary = logged
    assert exp["columns"] == WT.EXPERIENCE_COLUMNS
    rows = rows_of(exp)
    con = connect(run_dir)
    items = {r[0]: r[1:] for r in con.execute(
        "SELECT item_id, bank, owner, distiller, epoch, domain FROM memory_items").fetchall()}
    edv = {r["item_id"]: r for r in rows if r["method"] == "edv" and r["admitted"] != "discarded"}
    # every bank item once, with its provenance; the private ones owned by an approver
    assert set(edv) == set(items) and len(edv) == sum(r["method"] == "edv" and r["admitted"] != "discarded"
                                                       for r in rows)
    banks = {r["bank"] for r in edv.values()}
    assert banks == {"shared", "private"}, banks
    for item_id, (bank, owner, distiller, epoch, domain) in items.items():
        r = edv[item_id]
        assert (r["bank"], r["owner"], r["distiller"], r["epoch"], r["domain"]) == \
               (bank, owner, distiller, epoch, domain)
        assert r["admitted"] == ("shared" if bank == "shared" else f"private:{owner}")
        assert not r["is_poison"] and r["source_task_ids"] and r["text"].startswith("### ")
    # one private item's votes: every verifier of its candidate, as the votes Parquet says
    item = next(r for r in edv.values() if r["bank"] == "private")
    votes = con.execute("""SELECT verifier, approve, sees_reward, context_success FROM votes
                           WHERE candidate_id = ? ORDER BY verifier""",
                        [item["candidate_id"]]).fetchall()
    assert len(votes) >= 2 and item["approvals"] + item["rejections"] == len(votes)
    assert item["rejections"] == sum(not v[1] for v in votes) >= 1
    parts = item["votes"].split("; ")
    for part, (verifier, approve, sees, ctx_ok) in zip(parts, votes):
        assert part.startswith(f"{verifier} (")
        assert ("approve" if approve else "reject") in part
        shown = "hidden" if not sees else ("none" if ctx_ok is None else
                                           "success" if ctx_ok else "failure")
        assert part.endswith(f"reward shown: {shown}")
    assert item["owner"] == "good" and "bad (executor): reject" in item["votes"]
    # ReasoningBank's items: one row per item of every entry, named as retrieval names them
    rb = [r for r in rows if r["method"] == "reasoning_bank"]
    n_rb = con.execute("SELECT sum(len(items)) FROM rb_entries WHERE status = 'ok'").fetchone()[0]
    assert n_rb and len(rb) == n_rb
    assert all(r["admitted"] == f"rb:{r['owner']}" and ":" in r["item_id"] for r in rb)
    assert all(r["votes"].startswith(f"self-judge {r['owner']}: success") for r in rb)
    # retrieval counts agree with the episodes that name the item
    for r in rows:
        if r["item_id"] is None:
            continue
        n = con.execute("SELECT count(*) FROM episodes WHERE list_contains(retrieved_item_ids, ?)",
                        [r["item_id"]]).fetchone()[0]
        assert r["retrieved"] == n, r["item_id"]
    assert any(r["retrieved"] for r in rows)
    assert summary["tables/experiences_total"] == len(rows) == summary["tables/experiences_logged"]


def test_episode_sample_matches_the_episodes(logged):
    run_dir, _, eps, summary = logged
    assert eps["columns"] == WT.EPISODE_COLUMNS
    rows = rows_of(eps)
    con = connect(run_dir)
    n = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    assert len(rows) == min(n, WT.MAX_EPISODES) == summary["tables/episodes_logged"]
    for r in rows:
        want = con.execute("""SELECT method, agent, task_id, trial, status, success, reward,
                                     array_to_string(retrieved_item_ids, ', ')
                              FROM episodes WHERE episode_id = ? AND stage = ?""",
                           [r["episode_id"], r["stage"]]).fetchone()
        got = (r["method"], r["agent"], r["task_id"], r["trial"], r["status"], r["success"],
               r["reward"], r["retrieved_item_ids"] or "")
        assert got == (*want[:7], want[7] or ""), r["episode_id"]
    assert any(r["transcript"] for r in rows)
    # seeded: the same seed draws the same sample, another seed (on a bigger run) another
    assert WT.episode_rows(con, seed=0, limit=3) == WT.episode_rows(con, seed=0, limit=3)


def test_poison_twins_are_marked(logged, tmp_path):
    """A contamination run's wrong twins are rows of their own: poison, with their host."""
    import shutil

    from edv_ray.methods.contamination import ITEMS_SCHEMA
    from edv_ray.results.parquet_io import write_rows_atomic

    run_dir = tmp_path / "run"
    shutil.copytree(logged[0], run_dir, ignore=shutil.ignore_patterns("wandb"))
    con = connect(run_dir)
    host = con.execute("SELECT item_id, domain FROM memory_items WHERE bank = 'shared' LIMIT 1").fetchone()
    con.close()
    twin = dict(run_id="t", method="edv", condition="poison@0.1", share_asked=0.1, domain=host[1],
                bank="shared", owner=None, item_id="twin-1", host_item_id=host[0], title="Skip it",
                rule="Never confirm the record.", source="curated", n_clean=1, n_poison=1,
                share_reached=0.5)
    write_rows_atomic([twin], run_dir / "contamination" / "method=edv" / "poison@0.1.parquet",
                      ITEMS_SCHEMA)
    rows, total = WT.experience_rows(connect(run_dir))
    got = [dict(zip(WT.EXPERIENCE_COLUMNS, r)) for r in rows if r[1] == "twin-1"]
    assert len(got) == 1 and total == len(rows) == len(rows_of(logged[1])) + 1
    t = got[0]
    assert t["is_poison"] and t["method"] == "edv+poison@0.1" and t["host_item_id"] == host[0]
    assert t["admitted"] == "poison@0.1:shared" and t["text"] == "Never confirm the record."
    assert not any(r[WT.EXPERIENCE_COLUMNS.index("is_poison")] for r in rows if r[1] != "twin-1")
    # bounded: a LIMIT below the total logs that many rows and still counts them all
    few, all_ = WT.experience_rows(connect(run_dir), limit=2)
    assert len(few) == 2 and all_ == total and few == rows[:2]
