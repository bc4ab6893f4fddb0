"""`edv run` on a simulated pool (engine: simulated, started and supervised on Ray like
any engine): every method completes with the benchmark's own grading, and every episode
ended exactly as the planted profile decided, given the memory it retrieved."""

from __future__ import annotations

import pytest
from pathlib import Path

import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.views import connect
from edv_ray.simulation.oracle import Oracle

EXAMPLE = Path(__file__).resolve().parents[2] / "experiments" / "simulated_example.yaml"
METHODS = ["no_memory", "edv", "router", "judge", "reasoning_bank"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _run(cfg: dict):
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    result = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    return cfg, run_dir, result


def _example(tmp_path, **overrides) -> dict:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update({"output_dir": str(tmp_path / "runs"), "method": METHODS,
                "runtime": {"concurrency": 8, "workers": 1, "episode_timeout_s": 60}, **overrides})
    return cfg


def _episodes_match_the_plan(cfg, run_dir) -> int:
    oracle = Oracle(cfg.models["sim"].simulation, [cfg.benchmark.model_dump()])
    rows = connect(run_dir).execute(
        "SELECT agent, domain, task_id, trial, episode_id, experiences, status, success "
        "FROM episodes").fetchall()
    for agent, domain, task_id, trial, eid, exps, status, success in rows:
        assert status == "ok", eid
        assert success == oracle.planned_success(agent, domain, task_id, trial, eid, exps or []), eid
    return len(rows)


@pytest.mark.slow
def test_all_five_methods_on_tau2_mock(ray_session, tmp_path):
    bench = {"name": "tau2", "domains": ["mock"], "split": "all", "num_tasks": None,
             "task_ids": ["update_task_with_initialization_actions", "update_task_with_message_history"],
             "train_split": "all", "num_train_tasks": None,
             "train_task_ids": ["create_task_1", "update_task_1", "impossible_task_1"]}
    cfg, run_dir, result = _run(_example(tmp_path, benchmark=bench, edv={"epochs": 2},
                                         reasoning_bank={"epochs": 2}))
    assert result.complete, (result.errors, result.unfinished)
    con = connect(run_dir)
    rows = dict(con.execute("SELECT method, count(DISTINCT task_id) FROM method_results "
                            "GROUP BY 1").fetchall())
    assert rows == {m: 2 for m in METHODS}
    # the pool really was the simulated engine, started as a supervised server
    assert (run_dir / "servers.json").read_text().count('"engine": "simulated"') == 1
    assert _episodes_match_the_plan(cfg, run_dir) > 20
    # memory reached the acting prompts: EDV's and RB's inference retrieved items the
    # engine wrote (each decodes to a planted truth)
    oracle = Oracle(cfg.models["sim"].simulation)
    used = con.execute("SELECT stage, experiences FROM episodes WHERE stage IN ('infer', 'rb_infer') "
                       "AND len(experiences) > 0").fetchall()
    assert {s for s, _ in used} == {"infer", "rb_infer"}
    assert all(oracle.item_truth(x) is not None for _s, xs in used for x in xs)


@pytest.mark.slow
def test_mmtb_fixture_no_memory_and_router(ray_session, tmp_path):
    bench = {"name": "mmtb", "data_dir": str(FIXTURES / "mmtb"), "split": "all", "train_split": "all"}
    cfg = _example(tmp_path, benchmark=bench, method=["no_memory", "router"])
    cfg["runtime"]["trials"] = 3
    cfg["roles"].pop("user_simulator")
    cfg, run_dir, result = _run(cfg)
    assert result.complete, (result.errors, result.unfinished)
    assert _episodes_match_the_plan(cfg, run_dir) >= 2 * 2 * 3  # 2 dialogues × 2 executors × 3 trials
    res = connect(run_dir).execute("SELECT count(*) FROM method_results WHERE method = 'router'").fetchone()
    assert res == (2 * 3,)


@pytest.mark.slow
def test_construction_trials_repeat_only_the_evaluation(ray_session, tmp_path):
    """``construction_trials: 1`` with ``trials: 2``: each executor runs a training task
    once (EDV's and Router's executions, ReasoningBank's training stream; RB's entry
    holds one rollout's items) and every test episode runs twice."""
    bench = {"name": "tau2", "domains": ["mock"], "split": "all", "num_tasks": None,
             "task_ids": ["update_task_with_initialization_actions"],
             "train_split": "all", "num_train_tasks": None,
             "train_task_ids": ["create_task_1", "update_task_1", "impossible_task_1"]}
    cfg = _example(tmp_path, benchmark=bench, method=["edv", "router", "reasoning_bank"])
    cfg["runtime"].update(trials=2, construction_trials=1)
    cfg, run_dir, result = _run(cfg)
    assert result.complete, (result.errors, result.unfinished)
    con = connect(run_dir)
    trials = dict(con.execute("SELECT stage, list(DISTINCT trial ORDER BY trial) FROM episodes "
                              "GROUP BY stage").fetchall())
    assert trials["execute"] == [0] and trials["rb_execute"] == [0], trials
    assert trials["infer"] == [0, 1] and trials["rb_infer"] == [0, 1], trials
    # one rollout per (executor, training task): an RB entry learned from one episode
    per_entry = con.execute("SELECT min(len(episode_ids)), max(len(episode_ids)) FROM rb_entries "
                            "WHERE stage = 'rb_execute'").fetchone()
    assert per_entry == (1, 1)
    res = dict(con.execute("SELECT method, count(*) FROM method_results GROUP BY 1").fetchall())
    assert res["router"] == 2 and res["edv"] == 2  # one test task × 2 trials
