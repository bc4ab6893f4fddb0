"""Methods stay valid across errors and resumes (review of issue 18): a resumed run never
counts a task twice or routes on later evidence, a stream waits for its unfinished task,
Judge and Router never decide on a partial pool, later epochs are new samples, and
contaminated twins sit where the solvers can meet them."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.views import connect
from tests.methods import scripts
from tests.methods.test_methods import TEST, TRAIN, config, run

EDV = {"n_executors": 2, "retrieval_tau": -1.0, "retrieval_k": 3, "poison_per_task": 0,
       "require_contrast": False}
REFUSE = {"role": "assistant", "content": "I am sorry, I cannot help with that."}


def _start(cfg):
    c, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    return run_dir, pipeline.execute(c, run_id, run_dir, console=Console(quiet=True),
                                     show_progress=False)


def _resume(run_dir):
    c, run_id, rd = pipeline.prepare(None, str(run_dir))
    return pipeline.execute(c, run_id, rd, console=Console(quiet=True), show_progress=False)


def _rows(run_dir, method):
    return connect(run_dir).execute(
        "SELECT epoch, agent, domain, task_id, trial, status, success FROM method_results "
        "WHERE method = ? ORDER BY ALL", [method]).fetchall()


@pytest.mark.slow
def test_resume_keeps_routing_and_one_row_per_task(server, tmp_path):
    """good wins epoch 0's executions, bad epoch 1's: epoch 0's evaluation routes on epoch
    0 only, and a resume (under an absolute path) re-decides and re-runs nothing."""
    def agent(req, tag):
        eid, a = tag["episode_id"], tag["agent"]
        if eid.startswith("infer") or (a == "good" and eid.startswith("execute-e0")) or (
                a == "bad" and eid.startswith("execute-e1")):
            return server._agent_gold(req, tag)
        return REFUSE
    server.add_script("agent", agent)
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    cfg = config(server, tmp_path, "edv", edv={**EDV, "epochs": 2, "eval_after_each_epoch": True})
    cfg["output_dir"] = os.path.relpath(tmp_path / "runs")
    run_dir, res = _start(cfg)
    assert res.complete and not run_dir.is_absolute()
    routing = connect(run_dir).execute("SELECT epoch, solver FROM routing ORDER BY ALL").fetchall()
    assert {s for e, s in routing if e == 0} == {"good"}
    before = _rows(run_dir, "edv")
    assert len(before) == 2 * len(TEST)
    assert _resume(run_dir.resolve()).complete
    assert _rows(run_dir, "edv") == before
    assert connect(run_dir).execute("SELECT epoch, solver FROM routing ORDER BY ALL").fetchall() == routing
    from edv_ray.report.validity import run_checks

    assert all(c.ok for c in run_checks(run_dir) if c.name == "tasks_scored")


@pytest.mark.slow
def test_stream_waits_for_its_unfinished_task(server, tmp_path):
    state = {"fail": True}

    def agent(req, tag):
        if state["fail"] and tag["task_id"] == TEST[0] and tag["agent"] == "good":
            raise RuntimeError("down")
        return server._agent_gold(req, tag)
    server.add_script("agent", agent)
    server.add_script("self_judge", scripts.make_self_judge(lambda a: "success"))
    server.add_script("extractor", scripts.extractor)
    run_dir, res = _start(config(server, tmp_path, "reasoning_bank",
                                 reasoning_bank={"stream_on_test": True, "retrieval_k": 1}))
    assert not res.complete
    # the stream stopped at TEST[0]: TEST[1] did not run on a bank missing its entry
    assert {t for *_, t, _tr, _s, _ok in _rows(run_dir, "reasoning_bank")} == {TEST[0]}
    state["fail"] = False
    assert _resume(run_dir).complete
    rows = _rows(run_dir, "reasoning_bank")
    assert len(rows) == 2 * len(TEST) and len({r[1:5] for r in rows}) == len(rows)


@pytest.mark.slow
def test_judge_and_router_never_decide_on_a_partial_pool(server, tmp_path):
    state = {"fail": True}

    def agent(req, tag):
        if state["fail"] and tag["agent"] == "good":
            raise RuntimeError("down")
        return REFUSE if tag["agent"] == "bad" else server._agent_gold(req, tag)
    server.add_script("agent", agent)
    server.add_script("judge", scripts.make_judge("last"))  # good's run when it is there
    run_dir, res = _start(config(server, tmp_path, ["no_memory", "judge", "router"],
                                 router={"n_executors": 2}))
    assert not res.complete
    con = connect(run_dir)
    assert con.execute("SELECT count(*) FROM routing").fetchone()[0] == 0  # no blind routing
    assert {s for (s,) in con.execute("SELECT DISTINCT status FROM method_results "
                                      "WHERE method = 'judge'").fetchall()} == {"error"}
    state["fail"] = False
    assert _resume(run_dir).complete
    con = connect(run_dir)
    assert con.execute("SELECT list(DISTINCT agent), bool_and(success) FROM method_results "
                       "WHERE method = 'judge'").fetchone() == (["good"], True)
    assert con.execute("SELECT list(DISTINCT solver) FROM routing WHERE method = 'router'"
                       ).fetchone()[0] == ["good"]


@pytest.mark.slow
def test_later_epochs_are_new_samples(server, tmp_path):
    cfg = config(server, tmp_path, "router", router={"n_executors": 2, "epochs": 2})
    for a in cfg["agents"]:
        a["sampling"] = {"temperature": 0.6, **({"seed": 7} if a["name"] == "good" else {})}
    run_dir = run(cfg)
    rows = connect(run_dir).execute("""
        WITH first AS (SELECT agent, task_id, epoch, seed, request_hash FROM llm_calls
                       WHERE role = 'agent' AND stage = 'execute'
                       QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY started_at) = 1)
        SELECT agent, task_id, count(DISTINCT epoch), count(DISTINCT seed), count(DISTINCT request_hash)
        FROM first GROUP BY ALL""").fetchall()
    assert len(rows) == 2 * len(TRAIN)
    assert all(n_ep == 2 and n_seed == 2 and n_hash == 2 for _a, _t, n_ep, n_seed, n_hash in rows)
    good = connect(run_dir).execute("SELECT min(seed) FROM llm_calls WHERE agent = 'good' "
                                    "AND epoch = 0").fetchone()[0]
    assert good == 7  # an agent's own seed, as given, in epoch 0
