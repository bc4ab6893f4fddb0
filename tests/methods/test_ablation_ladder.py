"""The ablation ladder against the main result (issue 29, item 2): its row 7 is the main
table's EDV on the ladder's tasks (caught if either drifts), and the single-run rows
(one executor distilling its own run) get a prompt written for one run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edv_ray.config import load_config
from edv_ray.methods.edv.records import TrajectoryView
from edv_ray.methods.edv.stages import distill, distill_prompt
from edv_ray.sweep.grid import load_sweep
from tests.methods import scripts
from tests.methods.test_methods import config, roles_sent, run

EXP = Path(__file__).parents[2] / "experiments"
LADDER_SHARED = {"require_contrast", "distiller_sees_reward", "verifiers_see_reward"}
# words of a prompt written for several runs
MULTI_RUN = re.compile(r"compare the runs|several agents|the runs|each run", re.I)


def _edv_roles(cfg) -> tuple:
    r = cfg.roles
    return cfg.executor_names(), list(r.distillers), list(r.verifiers)


def _check_row7(row7, ladder_rows, main) -> None:
    e7 = row7.section("edv").model_dump()
    assert e7 == main.section("edv").model_dump()  # the main table's EDV, every field
    assert _edv_roles(row7) == _edv_roles(main)  # drawn from the same pool roles
    for row in ladder_rows:  # on the ladder's own benchmark selection
        assert row.benchmark.model_dump() == row7.benchmark.model_dump()
    # vs row 6 it changes only what the ladder's rows share (gate, reward visibility)
    e6 = ladder_rows[-1].section("edv").model_dump()
    changed = {k for k in e7 if e7[k] != e6[k]}
    assert changed and changed <= LADDER_SHARED, changed
    assert e7["distiller_sees_reward"] and e7["verifiers_see_reward"]


def test_ablation_files_row7_is_the_main_table_edv():
    rows = [load_config(p) for p in sorted((EXP / "ablation").glob("a[1-6]_*.yaml"))]
    assert len(rows) == 6
    _check_row7(load_config(EXP / "ablation" / "main_edv.yaml"), rows,
                load_config(EXP / "main_table" / "embedded.yaml"))


@pytest.mark.parametrize("size", ["embedded", "paper"])
def test_ablation_sweep_row7_is_the_main_table_edv(size):
    _, variants = load_sweep(EXP / "sweeps" / f"ablation_{size}.yaml")
    by_row = {v.axes["ablation"]: v.config for v in variants}
    assert len(variants) == len(by_row) == 7
    ladder = [c for name, c in sorted(by_row.items()) if name.startswith("a")]
    main = load_config(EXP / "main_table" / f"{size}.yaml")
    _check_row7(by_row["main_edv"], ladder, main)
    if size == "paper":  # the paper's ablation is on retail, row 6 = its main EDV there
        assert {tuple(c.benchmark.domains) for c in by_row.values()} == {("retail",)}
        assert "retail" in main.benchmark.domains


def _view(label: str, success: bool) -> TrajectoryView:
    return TrajectoryView(label=label, episode_id=label, agent=label, success=success,
                          reward=float(success), transcript=f"run {label}", signature=label)


def _prompt_sent(trajs, sees_reward: bool) -> str:
    sent = []

    def caller(messages, schema):  # the stage's caller interface: record, answer nothing
        sent.append(messages[-1]["content"])
        return '{"experiences": []}'

    res = distill("the task", "the policy", trajs, caller, sees_reward=sees_reward,
                  max_candidates=2, retries=0)
    assert res.status == "empty" and len(sent) == 1
    return sent[0]


@pytest.mark.parametrize("sees_reward", [True, False])
def test_one_run_gets_the_single_run_prompt(sees_reward):
    kind = "graded" if sees_reward else "blind"
    assert distill_prompt(1, sees_reward) == f"distill_single_{kind}.v2"
    assert distill_prompt(2, sees_reward) == f"distill_{kind}.v4"
    one = _prompt_sent([_view("T1", False)], sees_reward)
    assert "one agent's attempt" in one and not MULTI_RUN.search(one)
    assert ('outcome="failure"' in one) == sees_reward
    ours = re.sub(r"<run [^>]*>.*?</run>", "", one, flags=re.S)
    if not sees_reward:  # a blind distiller reads no word about grades either
        assert not re.search(r"success|reward|fail", ours, re.I)
    two = _prompt_sent([_view("T1", True), _view("T2", False)], sees_reward)
    assert "Compare the runs" in two


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_distill_requests_fit_the_number_of_runs(server, tmp_path):
    """Row 1's setting (one executor, self-distill, nothing shown) sends the single-run
    prompt; two executors with a third-party distiller, the comparing one."""
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    common = {"retrieval_tau": -1.0, "poison_per_task": 0, "require_contrast": False,
              "distiller_sees_reward": False, "verifiers_see_reward": False}
    sent = {}
    for n, edv in ((1, {"n_executors": 1, "distill_by": "self", "verify_by": "none"}),
                   (2, {"n_executors": 2, "distill_by": "third_party", "verify_by": "executors"})):
        before = len(roles_sent(server, "distiller"))
        run(config(server, tmp_path / str(n), "edv", edv={**common, **edv}))
        sent[n] = [scripts.prompt_of(r) for r in roles_sent(server, "distiller")[before:]]
    assert sent[1] and sent[2]
    for p in sent[1]:
        assert len(re.findall(r"<run ", p)) == 1
        assert "one agent's attempt" in p and not MULTI_RUN.search(p)
    for p in sent[2]:
        assert len(re.findall(r"<run ", p)) == 2
        assert "Compare the runs" in p and "several agents" in p
