"""Per-task difficulty (``task_spread``, issue 27 item 2): each task's planted rate is a
seeded Beta(μκ, (1 − μ)κ) draw around the agent's base rate, and the engine plays every
task at its own rate — so a task's trials are correlated and an interval that ignores the
clustering under-covers in whole-framework runs (check 6d)."""

from __future__ import annotations

import numpy as np
import pytest

from edv_ray.config_simulation import SimulationProfile
from edv_ray.simulation import planted as P
from edv_ray.simulation.oracle import Oracle
from edv_ray.testing.helpers import tau2_tasks
from tests.simulation.sim_helpers import play_tau2, profile, serving, within

TASKS = {t.id: t for t in tau2_tasks("mock")}
SOLO = ["create_task_1", "update_task_1", "impossible_task_1", "update_task_with_initialization_actions"]


def _rates(prof: SimulationProfile, agent: str, n: int = 4000) -> np.ndarray:
    return np.array([P.task_rate(prof, agent, "t", ("d", str(i))) for i in range(n)])


@pytest.mark.parametrize("mu,kappa", [(0.3, 2.0), (0.6, 1.0)])
def test_task_rates_follow_the_planted_beta(mu, kappa):
    prof = SimulationProfile.model_validate(
        {"agents": {"a": {"success": {"default": mu}}}, "task_spread": {"concentration": kappa}})
    r = _rates(prof, "a")
    assert abs(r.mean() - mu) < 0.015  # SE ≈ 0.006
    assert r.var() == pytest.approx(mu * (1 - mu) / (kappa + 1), rel=0.08)
    assert (r == _rates(prof, "a")).all()  # seeded: the same on every call


def test_per_agent_draws_differ_per_task_draws_are_shared():
    spread = {"agents": {"a": {"success": {"default": 0.5}}, "b": {"success": {"default": 0.5}}}}
    own = SimulationProfile.model_validate({**spread, "task_spread": {"concentration": 1.0}})
    shared = SimulationProfile.model_validate(
        {**spread, "task_spread": {"concentration": 1.0, "per": "task"}})
    assert np.corrcoef(_rates(own, "a", 2000), _rates(own, "b", 2000))[0, 1] < 0.1
    assert (_rates(shared, "a", 200) == _rates(shared, "b", 200)).all()
    other_seed = SimulationProfile.model_validate({**spread, "seed": 1, "task_spread": {"concentration": 1.0}})
    assert (_rates(other_seed, "a", 200) != _rates(own, "a", 200)).any()


def test_no_spread_and_rates_of_0_or_1_stay_at_the_base():
    prof = SimulationProfile.model_validate(
        {"agents": {"a": {"success": {"default": 1.0, "x": 0.0, "y": 0.4}}},
         "task_spread": {"concentration": 1.0}})
    assert P.task_rate(prof, "a", "t", ("d", "1")) == 1.0
    assert P.task_rate(prof, "a", "x", ("d", "1")) == 0.0
    assert P.task_rate(prof, "a", "y", ("d", "1")) != 0.4
    plain = SimulationProfile.model_validate({"agents": {"a": {"success": {"default": 0.4}}}})
    assert P.task_rate(plain, "a", "t", ("d", "1")) == 0.4
    with pytest.raises(ValueError):
        SimulationProfile.model_validate({"task_spread": {"concentration": 0}})


def test_the_engine_plays_each_task_at_its_own_rate():
    """Real HTTP, real τ²-bench episodes: each task's successes match its own planted rate
    (the oracle's), the rates differ between tasks, and every outcome is the decision the
    oracle replays."""
    prof = profile(task_spread={"concentration": 0.5})
    oracle = Oracle(prof)
    rates = {t: oracle.task_rate("a", "mock", t) for t in SOLO}
    assert max(rates.values()) - min(rates.values()) > 0.3  # this seed's draws are spread
    with serving(prof) as (_sim, ep):
        outs = {t: [play_tau2(ep, "a", TASKS[t], trial=i) for i in range(40)] for t in SOLO}
    for t, runs in outs.items():
        assert within(sum(o.success for o in runs), len(runs), rates[t]), (t, rates[t])
        for i, o in enumerate(runs):
            eid = _eid(t, i)
            assert o.success == oracle.planned_success("a", "mock", t, i, eid)


def _eid(task_id: str, trial: int) -> str:
    from edv_ray.runtime.spec import episode_id

    return episode_id("execute", 0, "mock", task_id, trial, "a")
