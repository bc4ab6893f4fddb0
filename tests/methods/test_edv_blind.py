"""The reward-blind EDV row (issue 29, item 1): ``edv_blind`` runs beside ``edv`` and
ReasoningBank in one run — its own folders, stage rows, call stages and views; its
distiller and verifiers never shown a grade (on the wire and in what it stored); epoch
0's executions shared with ``edv`` (run once), the memory-guided ones never; both rows
scored, reported with where each learns from the benchmark's reward, and valid. The
shipped main-table, epochs and token-cost configs list it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from edv_ray.config import ConfigError, load_config, load_config_dict
from edv_ray.results.views import connect
from tests.methods import scripts
from tests.methods.test_methods import TRAIN, TEST, config, run

ROOT = Path(__file__).parents[2]
SHIPPED = ["main_table/paper.yaml", "main_table/embedded.yaml", "epochs_paper.yaml",
           "epochs_embedded.yaml", "token_cost_paper.yaml", "token_cost_embedded.yaml"]
REWARD = ("distiller_sees_reward", "verifiers_see_reward")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_carry_the_blind_row(name):
    from edv_ray.methods.registry import reward_use

    cfg = load_config(ROOT / "experiments" / name)
    assert {"reasoning_bank", "edv", "edv_blind"} <= set(cfg.method_names())
    edv, blind = cfg.section("edv").model_dump(), cfg.section("edv_blind").model_dump()
    # the same EDV but for the reward: no other switch drifts between the two rows
    assert {k: edv[k] for k in edv if k not in REWARD} == {k: blind[k] for k in blind if k not in REWARD}
    assert [edv[k] for k in REWARD] == [True, True] and [blind[k] for k in REWARD] == [False, False]
    assert reward_use(cfg, "edv") == "distill, verify, routing"
    assert reward_use(cfg, "edv_blind") == "routing"
    assert reward_use(cfg, "reasoning_bank") == "none"


def test_blind_section_refuses_to_show_the_reward(tmp_path):
    nowhere = SimpleNamespace(base_url="http://127.0.0.1:9/v1")  # validation only: no call
    cfg = config(nowhere, tmp_path, ["edv_blind"], edv_blind={"verifiers_see_reward": True})
    with pytest.raises(ConfigError, match="edv_blind hides the reward: verifiers_see_reward"):
        load_config_dict(cfg)


def _tag(req) -> list[str]:
    return (req.get("user") or "").split("|")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_blind_row_beside_edv_and_reasoning_bank(server, tmp_path):
    from edv_ray.report.compare import write_report
    from edv_ray.report.compare_load import attach
    from edv_ray.report.tables import report
    from edv_ray.report.validity import run_checks

    scripts.script_stage_roles(server)  # bad never acts: every group contrasts
    edv = {"n_executors": 2, "epochs": 2, "retrieval_tau": -1.0, "poison_per_task": 1}
    run_dir = run(config(server, tmp_path, ["reasoning_bank", "edv", "edv_blind"],
                         edv=edv, edv_blind=edv, reasoning_bank={"retrieval_k": 1}))
    con = connect(run_dir)

    # ---- what each stage role was sent: the blind row's prompts carry no grade
    sent = {}
    for r in server.requests:
        tag = _tag(r)
        if len(tag) >= 7 and tag[1] in ("distiller", "verifier"):
            sent.setdefault(tag[-1].split("-e")[0], []).append(scripts.prompt_of(r))
    assert set(sent) == {"distill", "verify", "distill_edv_blind", "verify_edv_blind"}
    graded = [p for s in ("distill", "verify") for p in sent[s] if 'outcome="' in p and 'reward="' in p]
    assert graded  # the detector sees edv's grades
    assert not [p for s in ("distill_edv_blind", "verify_edv_blind") for p in sent[s]
                if 'outcome="' in p or 'reward="' in p]
    # ... and what each stored: every blind distill run and vote saw no reward, edv's did
    for view in ("distill_runs", "votes"):
        blind = con.execute(f"SELECT count(*), count(*) FILTER (WHERE sees_reward) "
                            f"FROM edv_blind_{view}").fetchone()
        main = con.execute(f"SELECT count(*), count(*) FILTER (WHERE sees_reward) FROM {view}").fetchone()
        assert blind[0] > 0 and blind[1] == 0 and main[0] == main[1] > 0

    # ---- separate folders, routing and views; edv's stay where they always were
    for folder in ("edv/candidates", "memory", "memory_snapshots/epoch=1",
                   "edv_blind/candidates", "edv_blind/votes", "edv_blind/memory",
                   "edv_blind/memory_snapshots/epoch=1", "routing/method=edv",
                   "routing/method=edv_blind"):
        assert (run_dir / folder).is_dir(), folder
    assert not list((run_dir / "edv").rglob("*edv_blind*"))
    items = dict(con.execute("SELECT method, count(*) FROM (SELECT method FROM memory_items "
                             "UNION ALL SELECT method FROM edv_blind_memory_items) GROUP BY 1").fetchall())
    assert set(items) == {"edv", "edv_blind"}

    # ---- call rows: the blind row's stages are its own, charged to it alone
    by_method = {}
    for method, phase, stage, calls in con.execute(
            "SELECT method, phase, stage, sum(calls) FROM token_use GROUP BY ALL").fetchall():
        by_method.setdefault(method, {})[stage] = (phase, calls)
    blind, main = by_method["edv_blind"], by_method["edv"]
    assert blind["distill_edv_blind"][0] == blind["verify_edv_blind"][0] == "construction"
    assert blind["verify_audit_edv_blind"][0] == "audit"
    assert not {"distill", "verify", "verify_audit"} & set(blind)
    assert not {s for s in main if s.endswith("edv_blind")}
    assert main["distill"][1] == blind["distill_edv_blind"][1] == 2 * len(TRAIN)

    # ---- epoch 0's executions: run once, used by both; epoch 1's (memory-guided): never shared
    runs = dict(con.execute("SELECT epoch, count(*) FROM episodes WHERE stage = 'execute' "
                            "GROUP BY 1").fetchall())
    assert runs == {0: 2 * len(TRAIN), 1: 2 * 2 * len(TRAIN)}  # not doubled at epoch 0
    uses = {(m, ep): (n, sh, mem) for m, ep, n, sh, mem in con.execute(
        "SELECT used_by, epoch, count(*), count(*) FILTER (WHERE shared), count(memory_key) "
        "FROM method_episodes WHERE stage = 'execute' GROUP BY ALL").fetchall()}
    assert uses[("edv", 0)] == uses[("edv_blind", 0)] == (2 * len(TRAIN), 2 * len(TRAIN), 0)
    assert uses[("edv", 1)] == uses[("edv_blind", 1)] == (2 * len(TRAIN), 0, 2 * len(TRAIN))
    tokens = dict(con.execute("SELECT method, sum(calls) FILTER (WHERE shared) FROM token_use "
                              "WHERE stage = 'execute' GROUP BY 1").fetchall())
    assert tokens["edv"] == tokens["edv_blind"] > 0  # charged in full to each

    # ---- both rows scored, each with where it learns from the reward
    scored = dict(con.execute("SELECT method, count(*) FROM method_results GROUP BY 1").fetchall())
    assert scored["edv"] == scored["edv_blind"] == len(TEST) and scored["reasoning_bank"] == 2 * len(TEST)
    tables = report(run_dir, console=Console(quiet=True), save=False)
    learns = {r["method"]: r["learns_from_reward"] for r in tables["method_pass_at_1"]}
    assert learns == {"edv": "distill, verify, routing", "edv_blind": "routing",
                      "reasoning_bank": "none"}
    audit = {(r["method"], r["sees_reward"]) for r in tables["verification_audit"]}
    assert audit == {("edv", True), ("edv_blind", False)}
    assert {r["method"] for r in tables["pass_by_epoch"]} == {"edv", "edv_blind"}

    # ---- validity: every check passes; the reward check confirms the blind row saw none
    checks = run_checks(run_dir)
    assert [c for c in checks if not c.ok] == []
    seen = {(c.method, c.figure) for c in checks if c.name == "reward_visibility"}
    assert {m for m, _ in seen} == {"edv", "edv_blind"}
    assert all(f.startswith(("distiller: 0/", "verifiers: 0/")) and f.endswith("(config: hidden)")
               for m, f in seen if m == "edv_blind")
    assert {(c.method, c.figure) for c in checks if c.name == "reward_use"} == {
        ("edv", "distill, verify, routing"), ("edv_blind", "routing"), ("reasoning_bank", "none")}
    memory = {c.method for c in checks if c.name == "edv_construction_memory"}
    assert memory == {"edv", "edv_blind"}

    # ---- edv compare: both rows, and the reward-use table in its Markdown
    cmp = attach([run_dir])
    out = write_report(cmp.con, tmp_path / "cmp", n_boot=50, runs=cmp.runs, notes=cmp.notes)
    assert {"edv", "edv_blind", "reasoning_bank"} <= {r["method"] for r in out["main"]}
    md = (tmp_path / "cmp" / "compare.md").read_text()
    section = md.split("### Which rows learn from the benchmark's reward")[1].split("###")[0]
    assert "| edv_blind | routing |" in section and "| edv | distill, verify, routing |" in section
    assert "| reasoning_bank | none |" in section
    assert "reward_use" not in md.split("### Validity checks")[1]
    pairs = {(p["method"], p["other"]) for p in out["pairs"]}
    assert ("edv", "edv_blind") in pairs and ("edv_blind", "reasoning_bank") in pairs
