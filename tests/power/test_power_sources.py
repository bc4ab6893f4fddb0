"""Where ``edv power`` gets its rates: a simulation profile (the rates it implies, checked
against the oracle's planted numbers and closed forms) and a pilot run folder (measured
rates and the task heterogeneity, recovered from outcomes drawn with a known one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.special import ndtri

from edv_ray.cli import main
from edv_ray.config import load_config
from edv_ray.power.pilot import estimate_heterogeneity, read_pilot
from edv_ray.power.profile import Profile
from edv_ray.simulation.oracle import Oracle
from tests.report.runfolder import config, episode, write_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def sim_config(tmp_path: Path, **sim) -> Path:
    profile = {"agents": {"a": {"success": {"default": 0.6}}, "b": {"success": {"default": 0.4}},
                          "c": {"success": {"default": 0.5}}},
               "memory": {"gain_correct": 0.04, "harm_wrong": 0.06},
               "writer": {"p_correct": 0.5, "contrast": 0.2, "third_party": 0.1,
                          "sees_reward": 0.05, "mislabeled": 0.2, "n_items": 3},
               "verify": {"approve_correct": 0.8, "approve_wrong": 0.3, "own_run_failed": 0.0,
                          "own_lesson": 0.0},
               "self_judge": {"success_given_success": 0.9, "success_given_failure": 0.5},
               **sim}
    cfg = {"run_id": "p", "method": ["no_memory", "reasoning_bank", "judge", "router", "edv"],
           "models": {"sim": {"engine": "simulated", "simulation": profile}},
           "agents": [{"name": n, "model": "sim", "prompt_strategy": "native_tools"}
                      for n in "abc"],
           "roles": {"executors": ["a", "b", "c"], "judge": "c"},
           "benchmark": {"name": "mind2web", "data_dir": str(FIXTURES / "mind2web"),
                         "split": "test_task"},
           "wandb": {"mode": "disabled"}}
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_profile_rates_are_the_planted_ones(tmp_path):
    cfg = load_config(sim_config(tmp_path))
    prof = Profile(cfg)
    oracle = Oracle(cfg.models["sim"].simulation)
    methods = {m.name: m for m in prof.methods(["x"])[0]}
    assert methods["no_memory"].rate("x") == pytest.approx(0.5)
    assert methods["router"].arms["x"][0].agent == "a" and methods["router"].rate("x") == 0.6
    # the judge: one pick among the three runs, as the oracle's pick distribution says
    want = 0.0
    for oa in (True, False):
        for ob in (True, False):
            for oc in (True, False):
                p = (0.6 if oa else 0.4) * (0.4 if ob else 0.6) * 0.5
                want += p * oracle.p_judge_picks_pass("c", [oa, ob, oc], [False, False, True])
    assert methods["judge"].rate("x") == pytest.approx(want)
    # EDV: without verifier bias every group admits alike: s = pc·ac² / (pc·ac² + (1−pc)·aw²)
    pc = oracle.p_item_correct("b", contrast=True, own=False, sees_reward=True)
    s = pc * 0.8 ** 2 / (pc * 0.8 ** 2 + (1 - pc) * 0.3 ** 2)
    assert prof.edv_precision(cfg.section("edv"), "x") == pytest.approx(s)
    assert methods["edv"].rate("x") == pytest.approx(0.6 + 3 * (s * 0.04 - (1 - s) * 0.06))
    # ReasoningBank, agent a: its own run (no contrast, no reward), mislabeled when the
    # self-judge contradicts the outcome
    mis = 0.6 * 0.1 + 0.4 * 0.5
    s_rb = (1 - mis) * 0.5 + mis * 0.2
    arm_a = next(x for x in methods["reasoning_bank"].arms["x"] if x.agent == "a")
    assert arm_a.rate == pytest.approx(0.6 + 3 * (s_rb * 0.04 - (1 - s_rb) * 0.06))


def edv_precision(path: Path) -> float:
    cfg = load_config(path)
    return Profile(cfg).edv_precision(cfg.section("edv"), "x")


def test_self_confirmation_bias_lowers_edv_precision(tmp_path):
    fair = edv_precision(sim_config(tmp_path))
    biased = edv_precision(sim_config(
        tmp_path, verify={"approve_correct": 0.8, "approve_wrong": 0.3, "own_run_failed": 0.5}))
    assert biased < fair - 0.02


def test_a_method_is_modelled_by_its_section_class(tmp_path):
    """edv_blind's section subclasses EDV's: a method of its own, named as not modelled."""
    path = sim_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["method"] = ["no_memory", "edv_blind", "edv"]
    path.write_text(yaml.safe_dump(raw))
    modelled, left = Profile(load_config(path)).methods(["x"])
    assert [m.name for m in modelled] == ["no_memory", "edv"] and left == ["edv_blind"]


def test_memory_built_from_several_rollouts_is_not_modelled(tmp_path):
    """With trials 3, construction runs three rollouts per executor unless
    construction_trials says one: the EDV / RB models draw one, so they are left out."""
    path = sim_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["runtime"] = {"trials": 3}
    path.write_text(yaml.safe_dump(raw))
    _m, left = Profile(load_config(path)).methods(["x"])
    assert left == ["reasoning_bank", "edv"]
    raw["runtime"]["construction_trials"] = 1
    path.write_text(yaml.safe_dump(raw))
    modelled, left = Profile(load_config(path)).methods(["x"])
    assert left == [] and len(modelled) == 5


def test_default_comparisons_follow_the_report_order():
    """No ``--compare``: the method last in report order against every other (A − B =
    later − earlier); a contaminated condition's label is never the lead."""
    from edv_ray.power.run import comparisons
    from edv_ray.report.method_facts import method_order

    assert comparisons(["no_memory", "reasoning_bank", "edv", "router"], None) == [
        ("edv", "no_memory"), ("edv", "reasoning_bank"), ("edv", "router")]
    order = method_order()
    rest = ["no_memory", "reasoning_bank", "judge", "router"]
    lead = max(rest, key=order.index)
    assert comparisons(rest + ["judge+poison@0.5"], None) == [
        (lead, m) for m in rest + ["judge+poison@0.5"] if m != lead]


@pytest.mark.slow
def test_cli_on_a_profile(tmp_path, capsys):
    code = main(["power", str(sim_config(tmp_path)), "--reps", "300", "--trials-grid", "1,3",
                 "--no-progress", "--task-icc", "0.3", "--test", "exact"])
    out = capsys.readouterr().out
    assert code == 0 and "exact sign-flip test" in out
    assert "edv vs router" in out and "edv vs reasoning_bank" in out
    assert "task ICC ρ = 0.30" in out and "3 trial(s)" in out


def latent_run(tmp_path: Path, rho: float, tau: float, tasks: int = 500) -> Path:
    """No-Memory over three agents and Router / EDV acting through agent a, every outcome
    drawn from the latent model with (ρ, τ)."""
    rng = np.random.default_rng(0)
    rates = {("eval", "a"): 0.7, ("eval", "b"): 0.5, ("eval", "c"): 0.6,
             ("route", "a"): 0.7, ("infer", "a"): 0.8}
    eps = []
    for t in range(tasks):
        u, v = rng.standard_normal(), {a: rng.standard_normal() for a in "abc"}
        for (stage, agent), p in rates.items():
            z = np.sqrt(rho) * u + np.sqrt(tau) * v[agent] + np.sqrt(1 - rho - tau) * rng.standard_normal()
            eps.append(episode("pilot", stage, agent, "retail", f"t{t}", bool(z < ndtri(p))))
    cfg = config("pilot", ["no_memory", "router", "edv"])
    return write_run(tmp_path / "pilot", cfg, episodes=eps,
                     test_tasks=[("retail", f"t{t}") for t in range(tasks)])


def test_pilot_rates_and_heterogeneity_are_recovered(tmp_path):
    run = latent_run(tmp_path, 0.4, 0.2)
    methods, design, rows = read_pilot(run)
    by = {m.name: m for m in methods}
    assert len(design.tasks) == 500 and design.trials == 1
    assert by["edv"].rate("t") == pytest.approx(0.8, abs=0.04)
    assert {x.agent for x in by["no_memory"].arms["t"]} == {"a", "b", "c"}
    het = estimate_heterogeneity(rows)
    assert het.task_icc == pytest.approx(0.4, abs=0.1)
    assert het.agent_icc == pytest.approx(0.2, abs=0.1)
    assert "estimated from the pilot" in het.source


def test_cli_on_a_pilot_folder(tmp_path, capsys):
    run = latent_run(tmp_path, 0.5, 0.2, tasks=120)
    code = main(["power", str(run), "--reps", "300", "--trials-grid", "1", "--no-progress",
                 "--compare", "edv:router"])
    out = capsys.readouterr().out
    assert code == 0 and "rates measured in the pilot run" in out
    assert "edv vs router" in out and "edv vs no_memory" not in out


def test_a_profile_with_task_spread_says_power_does_not_read_it(tmp_path):
    from edv_ray.power.run import load_source

    plain = load_source(str(sim_config(tmp_path)))
    assert not any("task_spread" in n for n in plain.notes)
    spread = load_source(str(sim_config(tmp_path, task_spread={"concentration": 1.0})))
    note = next(n for n in spread.notes if "task_spread" in n)
    assert "κ = 1" in note and "0.50" in note and "--agent-icc" in note
