"""Every method runs what its name says, in any order, at any epoch count (issue 18):
each test here failed on commit 2c5e7a9 (scripted server, real Ray and τ²-bench)."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import ConfigError, load_config_dict
from edv_ray.results.views import connect
from tests.methods import scripts
from tests.methods.test_methods import TEST, TRAIN, config, roles_sent, run

EDV = {"n_executors": 2, "retrieval_tau": -1.0, "retrieval_k": 3, "poison_per_task": 0,
       "require_contrast": False}


def _results(run_dir) -> dict:
    con = connect(run_dir)
    rows = con.execute("SELECT method, agent, epoch, domain, task_id, trial, status, success "
                       "FROM method_results ORDER BY ALL").fetchall()
    tokens = con.execute("SELECT method, phase, stage, shared, sum(calls), sum(prompt_tokens), "
                         "sum(completion_tokens) FROM token_use GROUP BY ALL ORDER BY ALL").fetchall()
    return {"rows": rows, "tokens": tokens}


@pytest.mark.slow
def test_methods_give_the_same_results_in_any_order(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    got = {}
    for order in (["router", "edv"], ["edv", "router"]):
        run_dir = run(config(server, tmp_path / "-".join(order), order,
                             router={"n_executors": 2, "epochs": 2},
                             edv={**EDV, "epochs": 2}))
        got[tuple(order)] = _results(run_dir)
        con = connect(run_dir)
        # EDV's epoch-1 executions were given the bank frozen after epoch 0 and used it;
        # Router's epoch-1 executions had no memory
        edv1 = con.execute("SELECT count(*), count(*) FILTER (WHERE len(retrieved_item_ids) > 0) "
                           "FROM method_episodes WHERE used_by = 'edv' AND stage = 'execute' "
                           "AND epoch = 1").fetchone()
        assert edv1[0] == 2 * len(TRAIN) and edv1[1] == edv1[0]
        router1 = con.execute("SELECT count(*), count(*) FILTER (WHERE len(experiences) > 0) "
                              "FROM method_episodes WHERE used_by = 'router' AND stage = 'execute' "
                              "AND epoch = 1").fetchone()
        assert router1 == (2 * len(TRAIN), 0)
        # epoch 0 (empty bank) is the one provably shared set of episodes
        shared = con.execute("SELECT DISTINCT epoch FROM method_episodes WHERE shared").fetchall()
        assert shared == [(0,)]
        checks = {c["name"]: c for c in _checks(run_dir)}
        assert checks["edv_construction_memory"]["ok"] and checks["shared_episodes"]["ok"]
    assert got[("router", "edv")] == got[("edv", "router")]
    # Router is charged only for its own executions (2 epochs × 3 tasks × 2 agents)
    router_exec = [t for t in got[("router", "edv")]["tokens"] if t[0] == "router" and t[2] == "execute"]
    assert sum(t[4] for t in router_exec if t[3]) > 0  # epoch 0, shared with EDV, charged in full


def _checks(run_dir) -> list[dict]:
    from edv_ray.report.validity import run_checks

    return [c.row() for c in run_checks(run_dir)]


@pytest.mark.slow
def test_reasoning_bank_epochs_retrieve_distinct_latest_tasks(server, tmp_path):
    from edv_ray.memory import Embedder
    from edv_ray.methods.reasoning_bank.store import load_entries, rb_experiences

    server.add_script("self_judge", scripts.make_self_judge(lambda a: "success"))
    server.add_script("extractor", scripts.extractor)
    run_dir = run(config(server, tmp_path, "reasoning_bank", reasoning_bank={
        "epochs": 3, "retrieval_k": 3, "eval_after_each_epoch": True}))
    con = connect(run_dir)
    # an evaluation after every epoch: RB has an epoch curve on the test tasks
    per_epoch = con.execute("SELECT epoch, count(*) FROM method_results WHERE method = "
                            "'reasoning_bank' GROUP BY 1 ORDER BY 1").fetchall()
    assert per_epoch == [(0, 4), (1, 4), (2, 4)]
    # k = 3 over 3 epochs: three DISTINCT past tasks, each from its latest entry (epoch 2),
    # and an evaluation never sees learning of a later epoch
    for epoch, ids in con.execute("SELECT epoch, retrieved_item_ids FROM episodes "
                                  "WHERE stage = 'rb_infer'").fetchall():
        entries = {i.rsplit(":", 1)[0] for i in ids}
        tasks = {e.rsplit("-", 1)[-1] for e in entries}
        assert len(entries) == 3 and len(tasks) == 3
        assert all(f"-e{epoch}-" in e for e in entries)
    # k = 1 after 3 epochs: the most similar past task's epoch-2 items, not epoch 0's
    bank = run_dir / "rb" / "bank" / "agent=good"
    got = rb_experiences(TEST[0], {"_bank_dir": str(bank), "k": 1, "domain": "mock",
                                   "exclude": [["mock", TEST[0]]]})
    assert len({i.rsplit(":", 1)[0] for i in got.item_ids}) == 1
    assert "-e2-" in got.item_ids[0]
    # the entries are kept (append-only): three epochs of each training task
    assert len(load_entries(bank)) == 3 * len(TRAIN)
    assert Embedder  # the provider embedded the query itself


@pytest.mark.slow
def test_agents_send_their_own_seeds(server, tmp_path):
    cfg = config(server, tmp_path, "no_memory")
    cfg["agents"] = [{"name": f"glm-{c}", "model": "scripted", "prompt_strategy": "native_tools",
                      "sampling": {"temperature": 0.7, "seed": s}}
                     for c, s in (("a", 1), ("b", 2), ("c", 3))]
    cfg["roles"] = {}
    run_dir = run(cfg)
    seeds = {}
    for r in roles_sent(server, "agent"):
        seeds.setdefault(r["user"].split("|")[2], set()).add(r.get("seed"))
    assert seeds == {"glm-a": {1}, "glm-b": {2}, "glm-c": {3}}
    checks = [c for c in _checks(run_dir) if c["name"] == "seed_diversity"]
    assert checks and all(c["ok"] for c in checks)


@pytest.mark.slow
def test_judge_calls_that_fail_are_counted_and_redone(server, tmp_path):
    def broken(req, tag):
        raise RuntimeError("judge endpoint down")

    server.add_script("judge", broken)
    cfg = config(server, tmp_path, ["no_memory", "judge"])
    c, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    res = pipeline.execute(c, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    assert not res.complete  # `edv run` exits 4
    con = connect(run_dir)
    rows = con.execute("SELECT status, success FROM method_results WHERE method = 'judge'").fetchall()
    assert rows == [("error", None)] * len(TEST)  # in the denominator, as failures
    pass_at_1 = con.execute("SELECT n, pass_at_1 FROM method_pass_at_1 WHERE method = 'judge'").fetchall()
    assert sum(n for n, _ in pass_at_1) == len(TEST)
    server.add_script("judge", scripts.make_judge("last"))  # good's run
    c, run_id, run_dir = pipeline.prepare(None, str(run_dir))
    res = pipeline.execute(c, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    assert res.complete
    rows = connect(run_dir).execute("SELECT status, success FROM method_results "
                                    "WHERE method = 'judge'").fetchall()
    assert rows == [("ok", True)] * len(TEST)


@pytest.mark.slow
def test_reward_blind_contrast_and_prompt(server, tmp_path):
    from edv_ray.methods.edv.jobs import has_contrast
    from edv_ray.methods.edv.records import TrajectoryView

    def view(label, success, sig):
        return TrajectoryView(label=label, episode_id=label, agent=label, success=success,
                              reward=float(success), transcript="", signature=sig)
    # blind: the gate reads what the runs did, never their grades
    assert not has_contrast([view("T1", True, "x"), view("T2", False, "x")], sees_reward=False)
    assert has_contrast([view("T1", False, "x"), view("T2", False, "y")], sees_reward=False)
    assert not has_contrast([view("T1", False, "x"), view("T2", False, "y")], sees_reward=True)
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    run(config(server, tmp_path, "edv", edv={**EDV, "require_contrast": True,
                                            "distiller_sees_reward": False,
                                            "verifiers_see_reward": False}))
    prompts = [scripts.prompt_of(r) for r in roles_sent(server, "distiller")]
    assert len(prompts) == len(TRAIN)  # bad and good did different things on every task
    for p in prompts + [scripts.prompt_of(r) for r in roles_sent(server, "verifier")]:
        ours = re.sub(r"<run [^>]*>.*?</run>", "", p, flags=re.S)  # our words, not the runs'
        assert 'outcome="' not in p and "successful" not in ours and "reward" not in ours


def test_ablation_rows_differ_in_the_factors_they_name():
    from pathlib import Path

    from edv_ray.config import load_config

    rows = sorted(Path("experiments/ablation").glob("a*.yaml"))
    assert len(rows) == 6
    named = {"n_executors", "distill_by", "verify_by"}
    sections = [load_config(p).section("edv").model_dump() for p in rows]
    for prev, cur, path in zip(sections, sections[1:], rows[1:]):
        changed = {k for k in cur if cur[k] != prev[k]}
        assert changed and changed <= named, f"{path.name} also changes {changed - named}"
    for s in sections[:3]:  # the self rows stage the trap: no grade shown
        assert not s["distiller_sees_reward"] and not s["verifiers_see_reward"]
    from edv_ray.sweep import load_sweep

    for sweep in ("ablation_embedded.yaml", "ablation_paper.yaml"):
        _, variants = load_sweep(Path("experiments/sweeps") / sweep)
        edv = [v.config.section("edv").model_dump() for v in variants
               if v.axes["ablation"] != "main_edv"]  # row 7: see test_ablation_ladder.py
        assert len(edv) == 6
        for prev, cur in zip(edv, edv[1:]):
            changed = {k for k in cur if cur[k] != prev[k]}
            assert changed and changed <= named, f"{sweep}: {changed - named}"
        assert not any(e["distiller_sees_reward"] or e["verifiers_see_reward"] for e in edv)


@pytest.mark.slow
def test_task_types_from_what_the_agent_observes(server, tmp_path):
    from edv_ray.report.tables import report

    server.agent_modes["bad"] = "nothing"
    cfg = config(server, tmp_path, ["no_memory", "router"])
    cfg["benchmark"].update(task_type_key="observed_cluster", n_task_types=2)
    run_dir = run(cfg)
    from edv_ray.results.parquet_io import read_rows

    types = {r["task_id"]: r["task_type"] for r in read_rows(run_dir / "task_types" / "part.parquet")}
    train_types = {types[t] for t in TRAIN}
    assert len(train_types) == 2 and all(t.startswith("mock:c") for t in types.values())
    assert {types[t] for t in TEST} <= train_types
    # the printed matrix is the one Router routed with: its construction executions only
    # (No-Memory's test runs of the same agents are not in it)
    printed = report(run_dir, console=Console(quiet=True), save=False)["ability_matrix"]
    assert {r["method"] for r in printed} == {"router"}
    assert sum(r["attempts"] for r in printed) == 2 * len(TRAIN)


@pytest.mark.slow
def test_memory_from_carries_the_ability_matrix(server, tmp_path):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    source = run(config(server, tmp_path / "a", "edv", edv=EDV))
    target = run(config(server, tmp_path / "b", "edv", edv=EDV, memory_from=str(source)))
    decisions = connect(target).execute("SELECT DISTINCT solver, basis FROM routing").fetchall()
    assert decisions == [("good", "task_type")]


def test_smaller_method_settings():
    from edv_ray.methods.reasoning_bank.config import ReasoningBankConfig
    from edv_ray.prompts import experiences_block

    # retrieved lessons are not called verified (RB's and poisoned items are not)
    for package in ("agents", "envs/mind2web", "envs/mmtb"):
        block = experiences_block(package, ["Check the id first."])
        assert "Check the id first." in block and "verified" not in block.lower()

    assert ReasoningBankConfig(matts="parallel", max_items=3).items_per_task == 3
    assert ReasoningBankConfig(matts="parallel").items_per_task == 5
    assert ReasoningBankConfig().items_per_task == 3
    base = {"models": {"m": {"engine": "endpoint", "litellm_model": "openai/m",
                             "api_base": "http://127.0.0.1:9/v1"}},
            "agents": [{"name": n, "model": "m"} for n in ("a", "b", "c")],
            "method": "edv", "edv": {"n_executors": 2}}
    load_config_dict(base)  # c is outside every group of two
    with pytest.raises(ConfigError, match="third_party"):
        load_config_dict({**base, "roles": {"distillers": ["a", "b"]}})
    with pytest.raises(ConfigError, match="domain_task_prefix"):
        load_config_dict({**base, "benchmark": {"domains": ["airline"],
                                                "task_type_key": "domain_task_prefix"}})
    cfg = load_config_dict({**base, "edv": {"retrieval_scope": "shared"}, "contamination": 0.1})
    assert cfg.contamination == [0.1] and cfg.section("edv").retrieval_scope == "shared"
