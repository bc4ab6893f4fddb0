"""Full path Ray → τ²-bench → Parquet against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.methods import ability_matrix
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config, tau2_tasks

READ_ONLY = ("get_", "find_", "search_", "list_", "calculate", "think", "transfer_to_human")


def _run(cfg_dict):
    cfg = load_config_dict(cfg_dict)
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_scores_one_for_both_strategies(server, tmp_path, domain):
    run_dir = _run(scripted_config(server.base_url, tmp_path, benchmark={
        "domains": [domain], "split": "test", "num_tasks": 5}))
    con = connect(run_dir)
    rows = con.execute("SELECT agent, task_id, status, reward, success, termination, "
                       "num_messages, messages_json FROM episodes").fetchall()
    assert len(rows) == 10  # 5 tasks × 2 agents (native + text tool strategies)
    tasks = {t.id: t for t in tau2_tasks(domain)}
    for agent, task_id, status, reward, success, term, n, msgs in rows:
        assert status == "ok", (agent, task_id)
        assert reward == 1.0 and success, (agent, task_id, reward)
        assert term == "user_stop"
        messages = json.loads(msgs)
        assert n == len(messages) and n > 2
        # the agent called exactly the task's gold actions, in order (both strategies)
        gold = [a.name for a in tasks[task_id].evaluation_criteria.actions or []
                if a.requestor == "assistant"]
        called = [tc["name"] for m in messages if m.get("role") == "assistant"
                  for tc in m.get("tool_calls") or []]
        assert called == gold, (agent, task_id)
    # an Ability Matrix over these (eval) rows; by default it counts construction
    # executions only, which this run has none of
    assert con.execute("SELECT sum(attempts) FROM ability_matrix").fetchone()[0] == 0
    ability_matrix.add_views(con, stages=("eval",))
    matrix = con.execute("SELECT agent, attempts, successes, score FROM ability_matrix "
                         "ORDER BY agent").fetchall()
    assert matrix == [("native", 5, 5, 1.0), ("text", 5, 5, 1.0)]
    # every call was attributed; the user simulator's tokens are separate
    roles = dict(con.execute("SELECT role, sum(calls) FROM tokens_by_stage GROUP BY role").fetchall())
    assert roles["agent"] > 0 and roles["user_sim"] >= 20


@pytest.mark.slow
def test_gold_replay_every_airline_test_task_at_concurrency_16(server, tmp_path, monkeypatch):
    from edv_ray.results.store import segments
    from edv_ray.runtime import batch

    # merge files while episodes still run: at every finished episode when a file waits (a
    # worker writes the episodes that end together as one batch file, so "every 5 episodes,
    # at least 5 files" may never come in 20 episodes)
    monkeypatch.setattr(batch, "COMPACT_EVERY", 1)
    run_dir = _run(scripted_config(
        server.base_url, tmp_path,
        agents=[{"name": "gold", "model": "scripted", "prompt_strategy": "native_tools"}],
        benchmark={"domains": ["airline"], "split": "test", "num_tasks": None},
        runtime={"concurrency": 16, "workers": 2, "episode_timeout_s": 300}))
    n, ok, p1 = connect(run_dir).execute(
        "SELECT count(*), count(*) FILTER (WHERE status = 'ok'), avg(CAST(success AS DOUBLE)) "
        "FROM episodes").fetchone()
    assert (n, ok, p1) == (20, 20, 1.0)
    # compacted during the run (several segments) and at its end (no per-episode file
    # left); every episode and every call is there exactly once
    for table in ("episodes", "llm_calls"):
        folder = run_dir / table / "stage=eval"
        assert len(segments(folder)) >= 2
        assert sorted(p.name for p in folder.iterdir()) == [p.name for p in segments(folder)]
    con = connect(run_dir)
    assert con.execute("SELECT count(*), count(DISTINCT episode_id) FROM episode_attempts"
                       ).fetchone() == (20, 20)
    assert con.execute("SELECT sum(llm_calls) FROM episodes").fetchone()[0] == con.execute(
        "SELECT count(*) FROM llm_calls").fetchone()[0]


def test_do_nothing_scores_zero_where_gold_changes_the_db(server, tmp_path):
    tasks = [t for t in tau2_tasks("airline", "test")
             if any(not a.name.startswith(READ_ONLY) for a in t.evaluation_criteria.actions or [])][:4]
    assert len(tasks) == 4
    server.mode = "nothing"
    run_dir = _run(scripted_config(server.base_url, tmp_path, benchmark={
        "domains": ["airline"], "split": "test", "num_tasks": None,
        "task_ids": [t.id for t in tasks]}))
    rows = connect(run_dir).execute("SELECT status, reward, success FROM episodes").fetchall()
    assert len(rows) == 8
    assert all(s == "ok" and r == 0.0 and not ok for s, r, ok in rows)
