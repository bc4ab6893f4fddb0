"""The token table against HAND-COUNTED ledgers, over run folders written as Parquet rows and
read through the real views (``token_use``, ``method_results``, ``uses``):

* EDV with ``eval_after_each_epoch`` (3 epochs, inference after each) — Pass@1 is scored at
  the last epoch, so its tokens are the last epoch's inference and ALL construction, over
  the 4 test tasks of that epoch (not 12 test episodes of all epochs);
* ReasoningBank with three agents — every agent solves every test task: the unit is still
  the test task (3 episodes each), and "per episode" divides by 3;
* EDV and Router sharing the ``execute`` episodes — charged in full to each, listed as
  shared.
"""

from __future__ import annotations

import pytest

from edv_ray.report.compare import write_report
from edv_ray.report.compare_load import attach
from edv_ray.report.compare_tokens import token_tables
from edv_ray.report.compare_units import Scored
from tests.report.runfolder import call, config, episode, write_run

TEST = ["t0", "t1", "t2", "t3"]
TRAIN = ["k0", "k1"]
D = "retail"
EDV_SOLVED = {0: {"t0"}, 1: {"t0", "t1"}, 2: {"t0", "t1", "t2"}}  # per epoch
RB_SOLVED = {"a": {"t0", "t1", "t2"}, "b": {"t0"}, "c": set()}


def edv_rows(run_id, stages=("execute", "distill", "verify", "infer")):
    """Per epoch e (×(e+1) where marked): execute 2 train tasks × agents a, b: agent 110·(e+1),
    user sim 55·(e+1); distill 1 call per train task 330·(e+1); verify 2 per train task
    220·(e+1); infer 4 test tasks: agent 1000·(e+1)+100, user sim 550."""
    eps, calls, uses = [], [], []
    for e in range(3):
        k = e + 1
        for task in TRAIN:
            for agent in ("a", "b"):
                ep = episode(run_id, "execute", agent, D, task, True, epoch=e)
                eps.append(ep)
                uses.append(("edv", "execute", e, ep["episode_id"]))
                calls += [call(run_id, "execute", "agent", agent, ep["episode_id"], e, 100 * k, 10 * k),
                          call(run_id, "execute", "user_sim", "u", ep["episode_id"], e, 50 * k, 5 * k)]
            job = f"distill-e{e}-{D}-{task}-t0"
            calls.append(call(run_id, "distill", "distiller", "c", job, e, 300 * k, 30 * k))
            for v in ("a", "b"):
                calls.append(call(run_id, "verify", "verifier", v, job.replace("distill", "verify"),
                                  e, 200 * k, 20 * k))
        for i, task in enumerate(TEST):
            ep = episode(run_id, "infer", "a" if i < 2 else "b", D, task, task in EDV_SOLVED[e],
                         epoch=e)
            eps.append(ep)
            uses.append(("edv", "infer", e, ep["episode_id"]))
            calls += [call(run_id, "infer", "agent", ep["agent"], ep["episode_id"], e, 1000 * k, 100),
                      call(run_id, "infer", "user_sim", "u", ep["episode_id"], e, 500, 50)]
    keep = [c for c in calls if c["stage"] in stages]
    return [x for x in eps if x["stage"] in stages], keep, [u for u in uses if u[1] in stages]


def rb_rows(run_id):
    """rb_execute epochs 0, 1: 2 train tasks × 3 agents, agent 88·(e+1), user sim 44·(e+1);
    rb_learn per (agent, task, epoch): self-judge 66 + extractor 132; rb_infer at epoch 1:
    4 test tasks × 3 agents, agent 770, user sim 330."""
    eps, calls, uses = [], [], []
    for e in range(2):
        for task in TRAIN:
            for agent in "abc":
                ep = episode(run_id, "rb_execute", agent, D, task, True, epoch=e)
                eps.append(ep)
                uses.append(("reasoning_bank", "rb_execute", e, ep["episode_id"]))
                calls += [call(run_id, "rb_execute", "agent", agent, ep["episode_id"], e,
                               80 * (e + 1), 8 * (e + 1)),
                          call(run_id, "rb_execute", "user_sim", "u", ep["episode_id"], e,
                               40 * (e + 1), 4 * (e + 1)),
                          call(run_id, "rb_learn", "self_judge", agent, ep["episode_id"], e, 60, 6),
                          call(run_id, "rb_learn", "extractor", agent, ep["episode_id"], e, 120, 12)]
    for task in TEST:
        for agent in "abc":
            ep = episode(run_id, "rb_infer", agent, D, task, task in RB_SOLVED[agent], epoch=1)
            eps.append(ep)
            uses.append(("reasoning_bank", "rb_infer", 1, ep["episode_id"]))
            calls += [call(run_id, "rb_infer", "agent", agent, ep["episode_id"], 1, 700, 70),
                      call(run_id, "rb_infer", "user_sim", "u", ep["episode_id"], 1, 300, 30)]
    return eps, calls, uses


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    e_eps, e_calls, e_uses = edv_rows("mix")
    r_eps, r_calls, r_uses = rb_rows("mix")
    cfg = config("mix", ["edv", "reasoning_bank"], edv={"epochs": 3, "eval_after_each_epoch": True},
                 reasoning_bank={"epochs": 2})
    return write_run(root / "mix", cfg, episodes=e_eps + r_eps, calls=e_calls + r_calls,
                     test_tasks=[(D, t) for t in TEST], uses=e_uses + r_uses)


def tokens(run, epoch="last"):
    cmp = attach([run])
    s = Scored(cmp.con, epoch)
    return {r["method"]: r for r in token_tables(cmp.con, s)["tokens"]}


def test_edv_with_eval_after_each_epoch_is_charged_on_the_scored_epoch(mixed):
    edv = tokens(mixed)["edv"]
    # construction, all three epochs: (440 + 660 + 880) · (1 + 2 + 3) = 11,880
    # inference, epoch 2 only: 4 × 3,100 = 12,400; user sim: 220 · 6 + 4 × 550 = 3,520
    assert (edv["construction_tokens"], edv["inference_tokens"], edv["user_sim_tokens"]) == \
        (11_880, 12_400, 3_520)
    assert (edv["test_tasks"], edv["episodes"], edv["episodes_per_task"], edv["solved"]) == \
        (4, 4, 1, 3)
    assert edv["construction_per_test_task"] == pytest.approx(11_880 / 4)  # not / 12
    assert edv["inference_per_test_task"] == pytest.approx(3_100)
    assert edv["total_per_test_task"] == pytest.approx(24_280 / 4)
    assert edv["total_per_solved_task"] == pytest.approx(24_280 / 3)
    # uses in scope: 12 execute episodes (all epochs) + 4 infer episodes (epoch 2), none shared
    assert (edv["episodes_used"], edv["episodes_shared"]) == (16, 0)


def test_edv_at_an_earlier_epoch_and_over_every_epoch(mixed):
    e1 = tokens(mixed, 1)["edv"]
    # epoch 1: construction of epochs 0 and 1 (1,980 + 3,960), inference 4 × 2,100
    assert (e1["construction_tokens"], e1["inference_tokens"], e1["test_tasks"], e1["solved"]) \
        == (5_940, 8_400, 4, 2)
    every = tokens(mixed, None)["edv"]
    # every epoch: 12 scored test units (4 tasks × 3 epochs), inference 4 × (1,100 + 2,100 + 3,100)
    assert (every["construction_tokens"], every["inference_tokens"], every["test_tasks"],
            every["solved"]) == (11_880, 25_200, 12, 6)


def test_reasoning_bank_with_three_agents_per_test_task_and_per_episode(mixed):
    rb = tokens(mixed)["reasoning_bank"]
    # construction: rb_execute 6 × 88 + 6 × 176 = 1,584; rb_learn 12 × 198 = 2,376
    # inference: 12 episodes × 770 = 9,240; user sim 6 × 44 + 6 × 88 + 12 × 330 = 4,752
    assert (rb["construction_tokens"], rb["inference_tokens"], rb["user_sim_tokens"]) == \
        (3_960, 9_240, 4_752)
    assert (rb["test_tasks"], rb["episodes"], rb["episodes_per_task"]) == (4, 12, 3)
    assert rb["solved"] == pytest.approx(2 / 3 + 1 / 3 + 1 / 3)  # mean over agents per task
    assert rb["inference_per_test_task"] == pytest.approx(9_240 / 4)
    assert rb["inference_per_episode"] == pytest.approx(770)
    assert rb["total_per_test_task"] == pytest.approx(13_200 / 4)
    assert rb["total_per_solved_task"] == pytest.approx(13_200 / (4 / 3))
    edv = tokens(mixed)["edv"]
    # "vs RB" on the same unit (per test task) for both methods
    assert edv["total_ratio_to_rb"] == pytest.approx((24_280 / 4) / (13_200 / 4))
    assert edv["construction_ratio_to_rb"] == pytest.approx(2_970 / 990)
    assert edv["inference_ratio_to_rb"] == pytest.approx(3_100 / 2_310)


def test_the_report_states_scope_and_unit(mixed, tmp_path):
    cmp = attach([mixed])
    write_report(cmp.con, tmp_path, n_boot=50, runs=cmp.runs, notes=cmp.notes)
    md = (tmp_path / "compare.md").read_text()
    assert "Scope: the same as Pass@1 (each (run, method) at its last epoch)" in md
    assert "| mix | edv | 4 | 1 | 3 | 11,880 | 12,400 | 0 | 3,520 | 2,970 | 3,100 | 6,070 |" in md
    assert "| mix | reasoning_bank | 4 | 3 |" in md


def test_episodes_two_methods_share_are_charged_in_full_to_each(tmp_path):
    eps, calls, uses = edv_rows("sh", stages=("execute",))
    router_eps = [episode("sh", "route", "a", D, t, True) for t in TEST]
    infer_eps, infer_calls, infer_uses = edv_rows("sh", stages=("infer",))
    uses += [("router", "execute", e, eid) for _, _, e, eid in uses if e == 0]
    uses += [("router", "route", 0, ep["episode_id"]) for ep in router_eps]
    cfg = config("sh", ["edv", "router"], edv={"epochs": 3, "eval_after_each_epoch": True})
    run = write_run(tmp_path / "sh", cfg, episodes=eps + router_eps + infer_eps,
                    calls=calls + infer_calls, test_tasks=[(D, t) for t in TEST],
                    uses=uses + infer_uses)
    t = tokens(run)
    # the execute calls (agent: 440 per epoch · (1 + 2 + 3)) are charged in full to each
    assert t["edv"]["construction_tokens"] == 2_640 and t["router"]["construction_tokens"] > 0
    # uses: Router used the 4 epoch-0 execute episodes that EDV also used
    assert t["router"]["episodes_shared"] == 4 and t["edv"]["episodes_shared"] == 4
