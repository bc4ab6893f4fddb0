"""EDV end to end on Ray with the scripted server: routing outcomes, dedup, retrieval
order, leave-one-task-out, malformed output, the audit views."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.memory import MemoryBank
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config

TRAIN = ["create_task_1", "update_task_1", "impossible_task_1"]
TEST = ["create_task_1_with_env_assertions", "update_task_with_initialization_actions"]
DISTINCT = {  # one unrelated rule per training task (not near-duplicates of each other)
    "create_task_1": "check that the user exists before creating any task for them",
    "update_task_1": "only pending or completed are valid values for a status field",
    "impossible_task_1": "re-read the initial database snapshot before acting",
}


def edv_config(server, tmp_path, **edv) -> dict:
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("good", "bad", "judge")]
    bench = {"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
             "train_split": "all", "train_task_ids": TRAIN, "task_ids": TEST}
    bench.update({k: edv.pop(k) for k in list(edv) if k in bench})
    cfg = scripted_config(
        server.base_url, tmp_path, method="edv", agents=agents,
        roles={"executors": ["good", "bad"]}, benchmark=bench)
    cfg["edv"] = {"n_executors": 2, "retrieval_tau": -1.0, "retrieval_k": 3, "poison_per_task": 1,
                  **edv}
    return cfg


def distiller_script(rules_per_task):
    def script(req, tag):
        lessons = [{"title": f"Lesson {kind}", "when_to_use": "When a task must be changed",
                    "rule": rule, "tags": ["mock"], "evidence": ["T1"]}
                   for kind, rule in rules_per_task(tag["task_id"])]
        return {"role": "assistant", "content": json.dumps({"experiences": lessons})}
    return script


def verifier_script(req, tag):
    """good approves unanimous + partial lessons; bad approves only unanimous ones;
    both reject poison (whose rules are not ours)."""
    prompt = req["messages"][-1]["content"]
    lesson = prompt.split("<proposed_lesson>")[1]
    ok = "UNANIMOUS" in lesson or ("PARTIAL" in lesson and tag["agent"] == "good")
    return {"role": "assistant", "content": json.dumps({"approve": ok, "rationale": f"{tag['agent']} says {ok}"})}


def run(cfg_dict):
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg_dict))
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    return run_dir


@pytest.mark.slow
def test_routing_dedup_retrieval_and_audit(server, tmp_path):
    server.agent_modes["bad"] = "nothing"  # a success and a failure in every group
    server.add_script("distiller", distiller_script(lambda t: [
        ("u", "UNANIMOUS: always confirm the task id before updating it."),
        ("p", f"PARTIAL: {DISTINCT[t]}."),
        ("n", "NONE: guess the user id when it is missing.")]))
    server.add_script("verifier", verifier_script)
    run_dir = run(edv_config(server, tmp_path))
    con = connect(run_dir)
    routes = dict(con.execute("SELECT split_part(c.rule, ':', 1), list(DISTINCT d.route) FROM decisions d "
                              "JOIN candidates c USING (candidate_id) GROUP BY 1").fetchall())
    assert routes == {"UNANIMOUS": ["shared"], "PARTIAL": ["private"], "NONE": ["discard"]}
    # every vote is stored with its rationale: 3 tasks × (3 candidates + 1 poison) × 2 voters
    n, with_rationale = con.execute("SELECT count(*), count(rationale) FROM votes").fetchone()
    assert n == with_rationale == 24
    # the distiller was a third party, never in the group
    assert con.execute("SELECT DISTINCT distiller, distiller_type FROM distill_runs").fetchall() == [
        ("judge", "third_party")]
    bank = MemoryBank.load(run_dir / "memory")
    shared = bank.items(bank="shared")
    assert len(shared) == 1  # the same rule from three tasks merged, provenance kept
    assert sorted(shared[0].source_task_ids) == sorted(TRAIN) and shared[0].merged_count == 2
    private = bank.items(bank="private", owner="good")
    assert len(private) == 3 and not bank.items(bank="private", owner="bad")
    assert not [i for i in bank.items() if "guess the user id" in i.rule]  # discarded
    # inference: the Ability Matrix picks `good`; shared memory first, then private
    rows = con.execute("SELECT agent, retrieved_banks, retrieved_item_ids, experiences FROM episodes "
                       "WHERE stage = 'infer' ORDER BY task_id").fetchall()
    assert len(rows) == 2
    for agent, banks, ids, exps in rows:
        assert agent == "good" and banks == ["shared", "private", "private"]
        assert ids[0] == shared[0].item_id and len(exps) == 3
    audit = {r[0]: r for r in con.execute(
        "SELECT verifier_type, votes, approve_rate FROM verification_audit").fetchall()}
    assert audit["executor"][1] == 18 and audit["executor"][2] == pytest.approx(9 / 18)
    assert con.execute("SELECT poison_candidates, to_shared, to_private, discarded "
                       "FROM poison_admission").fetchone() == (3, 0.0, 0.0, 1.0)
    tokens = dict(con.execute("SELECT stage, sum(calls) FROM tokens_by_stage GROUP BY 1").fetchall())
    # the 6 poison votes are the admission audit's cost, not construction's
    assert tokens["distill"] == 3 and tokens["verify"] == 18 and tokens["verify_audit"] == 6
    assert tokens["execute"] > 0
    phases = dict(con.execute("SELECT phase, sum(calls) FROM token_use WHERE method = 'edv' "
                              "AND stage LIKE 'verify%' GROUP BY 1").fetchall())
    assert phases == {"construction": 18, "audit": 6}


@pytest.mark.slow
def test_leave_one_task_out_guard(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", distiller_script(lambda t: [("u", f"UNANIMOUS: {DISTINCT[t]}.")]))
    server.add_script("verifier", verifier_script)
    cfg = edv_config(server, tmp_path, task_ids=["update_task_1"], retrieval_k=5,
                     poison_per_task=0)
    run_dir = run(cfg)
    (exps,) = connect(run_dir).execute(
        "SELECT experiences FROM episodes WHERE stage = 'infer'").fetchone()
    assert len(exps) == 2 and not any(DISTINCT["update_task_1"] in e for e in exps)
    assert all(DISTINCT[t] in " ".join(exps) for t in TRAIN if t != "update_task_1")


@pytest.mark.slow
def test_malformed_distill_and_votes_never_reach_memory(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", lambda req, tag: {"role": "assistant", "content": "Sure! Here are lessons"})
    server.add_script("verifier", lambda req, tag: {"role": "assistant", "content": "{broken"})
    run_dir = run(edv_config(server, tmp_path, distill_retries=2))
    con = connect(run_dir)
    assert con.execute("SELECT DISTINCT status, attempts, n_candidates FROM distill_runs").fetchall() == [
        ("malformed", 3, 0)]
    assert con.execute("SELECT count(*) FROM candidates").fetchone()[0] == 0
    # the poison candidates were still voted on: unparseable votes are rejects
    assert con.execute("SELECT bool_and(NOT approve), bool_and(NOT parse_ok), count(*) FROM votes").fetchone() == (
        True, True, 6)
    assert len(MemoryBank.load(run_dir / "memory")) == 0


@pytest.mark.slow
def test_no_contrast_no_distillation(server, tmp_path):
    server.add_script("distiller", distiller_script(lambda t: [("u", "UNANIMOUS: x y z w.")]))
    run_dir = run(edv_config(server, tmp_path, poison_per_task=0))  # both executors succeed
    con = connect(run_dir)
    assert con.execute("SELECT DISTINCT status FROM distill_runs").fetchall() == [("no_contrast",)]
    assert con.execute("SELECT count(*) FROM llm_calls WHERE role = 'distiller'").fetchone()[0] == 0
