"""Each method's logic pinned on the scripted server (real Ray, HTTP, τ²-bench grading):
ReasoningBank (self-judge without reward, extraction from failures, k = 1 task retrieval,
append-only), Judge (pick among the pool's runs, accuracy vs rewards), Router (best
Ability-Matrix cell), and every method's rows in the one shared method_results table."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config
from tests.methods import scripts

TRAIN = ["create_task_1", "update_task_1", "impossible_task_1"]
TEST = ["create_task_1_with_env_assertions", "update_task_with_initialization_actions"]


def config(server, tmp_path, method, **sections) -> dict:
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("bad", "good", "judge")]
    cfg = scripted_config(
        server.base_url, tmp_path, method=method, agents=agents,
        roles={"executors": ["bad", "good"], "judge": "judge"},
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
                   "task_ids": TEST, "train_split": "all", "train_task_ids": TRAIN})
    cfg.update(sections)
    return cfg


def run(cfg_dict) -> Path:
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg_dict))
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    return run_dir


def roles_sent(server, role):
    return [r for r in server.requests if (r.get("user") or "").split("|")[1:2] == [role]]


@pytest.mark.slow
def test_reasoning_bank_self_judges_extracts_and_retrieves_one_task(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    # the self-judge calls every run a success except bad's: its label, not the reward
    server.add_script("self_judge", scripts.make_self_judge(
        lambda agent: "failure" if agent == "bad" else "success"))
    server.add_script("extractor", scripts.extractor)
    run_dir = run(config(server, tmp_path, "reasoning_bank",
                         reasoning_bank={"epochs": 2, "retrieval_k": 1}))
    con = connect(run_dir)
    # the judge never saw a grade: no reward / outcome attribute in its prompts
    judged = roles_sent(server, "self_judge")
    assert judged and not any("reward" in scripts.prompt_of(r) or 'outcome="' in scripts.prompt_of(r)
                              for r in judged)
    # each judge call is the same model at temperature 0, the extractor at 1.0
    assert {r["temperature"] for r in judged} == {0.0}
    assert {r["temperature"] for r in roles_sent(server, "extractor")} == {1.0}
    # labels stored beside true rewards: bad really failed, good really succeeded
    audit = {a: (n, p_fail) for a, n, p_fail in con.execute(
        "SELECT agent, judged, p_judge_success_given_failed FROM rb_judge_audit "
        "WHERE stage = 'rb_execute'").fetchall()}
    assert audit["bad"][0] == 6 and audit["bad"][1] == 0.0
    # failures become lessons (failure prompt), successes strategies
    items = con.execute("SELECT agent, judge_labels, items FROM rb_entries").fetchall()
    assert {a: lab for a, lab, _ in items} == {"bad": ["failure"], "good": ["success"]}
    assert all(it[0]["title"].startswith("lesson") for a, _, its in items if a == "bad" for it in [its])
    assert all(its[0]["title"].startswith("strategy") for a, _, its in items if a == "good")
    # append-only: one entry file per (agent, epoch, task); epoch 1 added, never rewrote
    files = sorted((run_dir / "rb" / "bank").rglob("*.parquet"))
    assert len(files) == 2 * 2 * len(TRAIN)
    # k = 1: every inference episode got the items of exactly one past task, of its own
    # bank, never its own task; retrieval happened with the observed ticket
    rows = con.execute("SELECT agent, task_id, retrieved_item_ids, observed_text "
                       "FROM episodes WHERE stage = 'rb_infer'").fetchall()
    assert len(rows) == 2 * len(TEST)
    for agent, task_id, ids, observed in rows:
        entries = {i.rsplit(":", 1)[0] for i in ids}
        assert len(entries) == 1 and f"rb-{agent}-" in next(iter(entries))
        assert not next(iter(entries)).endswith(task_id) and observed
    # RB's Pass@1 is per model in the shared table
    got = dict(con.execute("SELECT agent, count(*) FROM method_results "
                           "WHERE method = 'reasoning_bank' GROUP BY 1").fetchall())
    assert got == {"bad": 2, "good": 2}


@pytest.mark.slow
def test_judge_picks_among_pool_runs_and_reports_accuracy(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("judge", scripts.make_judge("first"))  # T1 = bad (sorted by agent)
    run_dir = run(config(server, tmp_path, ["no_memory", "judge"]))
    con = connect(run_dir)
    # Judge reused the No-Memory runs (each pool model once per test task)
    assert con.execute("SELECT count(*) FROM episodes WHERE stage = 'eval'").fetchone()[0] == 4
    # the judge saw no rewards or outcome labels (the EDV distiller's are attributes)
    sent = roles_sent(server, "judge")
    assert len(sent) == 2
    for r in sent:
        assert 'reward="' not in scripts.prompt_of(r) and 'outcome="' not in scripts.prompt_of(r)
        assert scripts.prompt_of(r).count("<run label=") == 2
    picks = con.execute("SELECT picked_agent, picked_success, any_success FROM judge_picks").fetchall()
    assert picks == [("bad", False, True)] * 2
    acc = con.execute("SELECT judge_pass_at_1, oracle_best_of_n, picked_a_pass_when_one_existed "
                      "FROM judge_accuracy").fetchone()
    assert acc == (0.0, 1.0, 0.0)
    res = dict(con.execute("SELECT method, avg(CAST(success AS DOUBLE)) FROM method_results "
                           "GROUP BY 1").fetchall())
    assert res == {"judge": 0.0, "no_memory": 0.5}


@pytest.mark.slow
def test_router_picks_the_best_ability_cell(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    run_dir = run(config(server, tmp_path, "router", router={"n_executors": 2}))
    con = connect(run_dir)
    cells = dict(con.execute("SELECT agent, score FROM ability_matrix").fetchall())
    assert cells == {"bad": 0.0, "good": 1.0}
    solvers = con.execute("SELECT DISTINCT solver, basis FROM routing WHERE method = 'router'").fetchall()
    assert solvers == [("good", "task_type")]
    assert con.execute("SELECT count(*), bool_and(success) FROM method_results "
                       "WHERE method = 'router'").fetchone() == (2, True)
    # no memory was used
    assert con.execute("SELECT count(*) FROM episodes WHERE stage = 'route' "
                       "AND len(experiences) > 0").fetchone()[0] == 0


def test_admit_with_no_votes_discards():
    from edv_ray.methods.edv.stages import admit

    assert admit({}) == ("discard", [])
    assert admit({"a": True, "b": False}) == ("private", ["a"])
    assert admit({"a": True, "b": True}) == ("shared", ["a", "b"])


@pytest.mark.slow
def test_memory_from_another_run(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    edv = {"n_executors": 2, "retrieval_tau": -1.0, "poison_per_task": 0}
    source = run(config(server, tmp_path / "a", "edv", edv=edv))
    n_calls = len(roles_sent(server, "distiller"))
    target = run(config(server, tmp_path / "b", "edv", edv=edv, memory_from=str(source)))
    assert len(roles_sent(server, "distiller")) == n_calls  # no construction in the target
    con = connect(target)
    assert con.execute("SELECT count(*) FROM episodes WHERE stage = 'execute'").fetchone()[0] == 0
    ids = con.execute("SELECT flatten(list(retrieved_item_ids)) FROM episodes "
                      "WHERE stage = 'infer'").fetchone()[0]
    src_ids = {i for (i,) in connect(source).execute("SELECT item_id FROM memory_items").fetchall()}
    assert ids and set(ids) <= src_ids
    assert "memory_from" in (target / "memory" / "SOURCE.json").read_text()
