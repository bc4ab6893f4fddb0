"""The edge tail of the task-clustered interval (edv_ray/report/edge_tail.py): the chance of
"no success at all", the intra-task κ it is read at, the three cases of the lower bound, and
clustered_rate using it on the side of the edge its estimate is nearer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as sps

from edv_ray.report import edge_tail
from edv_ray.report.stats import _wilson_bounds, clustered_rate


def test_p_none_is_the_beta_binomial_chance_of_no_success():
    rng = np.random.default_rng(5)
    u = rng.beta(0.05, 0.95, (200_000, 8))  # μ = 0.05, κ = 1: 8 tasks × 10 trials
    simulated = float((rng.binomial(10, u).sum(axis=1) == 0).mean())
    assert math.exp(edge_tail.log_p_none(0.05, 1.0, [10] * 8)) == pytest.approx(simulated, abs=0.004)
    assert 0.25 < simulated < 0.35
    # the limits: every episode independent, each task's episodes all alike
    assert edge_tail.log_p_none(0.1, math.inf, [10] * 8) == pytest.approx(80 * math.log(0.9))
    assert edge_tail.log_p_none(0.1, 0.0, [10] * 8) == pytest.approx(8 * math.log(0.9))
    assert edge_tail.log_p_none(0.1, 1e6, [10] * 8) == pytest.approx(80 * math.log(0.9), rel=1e-3)
    assert edge_tail.log_p_none(0.0, 1.0, [3]) == 0.0 and edge_tail.log_p_none(1.0, 1.0, [3]) == -math.inf


def test_kappa_from_the_design_effect():
    assert edge_tail.intra_task_kappa(160, 160, 16) == math.inf  # no clustering
    assert edge_tail.intra_task_kappa(16, 160, 16) == 0.0  # a task's episodes all alike
    # deff 5.5 with 10 episodes a task: ρ = 0.5, κ = 1
    assert edge_tail.intra_task_kappa(160 / 5.5, 160, 16) == pytest.approx(1.0)
    assert edge_tail.intra_task_kappa(20, 20, 20) == math.inf  # one episode a task


def test_lower_bound_spends_the_tail_only_where_no_success_is_likely():
    m, kappa, tail = [10] * 16, 1.0, 0.025
    # far from 0: "no success" is rare at the two-sided bound, which stays
    assert edge_tail.lower_bound(0.3, 0.35, kappa, m, tail) == 0.3
    # near 0: likely even at the one-sided bound, which is taken
    assert edge_tail.lower_bound(0.001, 0.004, kappa, m, tail) == 0.004
    # between: the rate where the chance of no success is the tail
    lo = edge_tail.lower_bound(0.01, 0.3, kappa, m, tail)
    assert 0.01 < lo < 0.3
    assert math.exp(edge_tail.log_p_none(lo, kappa, m)) == pytest.approx(tail, rel=1e-6)


def test_clustered_rate_near_0_takes_the_one_sided_lower_bound_and_mirrors_near_1():
    y, m = [10, 10] + [0] * 14, [10] * 16  # 2 of 16 tasks solved, alike within a task
    r = clustered_rate(y, m)
    assert r.n_eff == 16  # all the variance between tasks: κ = 0, "none" ~ 0.875^16 at p̂
    t = r.rate
    z_two = 1.959964 * sps.t.ppf(0.975, 4) / sps.t.ppf(0.975, 159)  # df = 2 · 2 tasks
    z_one = 1.644854 * sps.t.ppf(0.95, 4) / sps.t.ppf(0.95, 159)
    two, hi = _wilson_bounds(t, 16, z_two)
    one = _wilson_bounds(t, 16, z_one)[0]
    assert math.exp(edge_tail.log_p_none(one, 0.0, m)) > 0.025  # no success likely there
    assert r.lo == pytest.approx(one, rel=1e-4) and r.lo > two  # the far tail spent
    assert r.hi == pytest.approx(hi, rel=1e-4)  # the edge's side unchanged
    flipped = clustered_rate([10 - v for v in y], m)  # the same data counted as failures
    assert (flipped.lo, flipped.hi) == (pytest.approx(1 - r.hi), pytest.approx(1 - r.lo))


def test_clustered_rate_far_from_the_edge_is_unchanged():
    y, m = [2, 1, 3, 2, 0, 1, 2, 3, 1, 2] * 4, [3] * 40  # 40 tasks, p̂ ≈ 0.57
    r = clustered_rate(y, m)
    v = 40 / 39 * sum((yi - r.rate * 3) ** 2 for yi in y) / 120 ** 2
    n_eff = min(120.0, max(40.0, r.rate * (1 - r.rate) / v))
    z = 1.959964 * sps.t.ppf(0.975, 39) / sps.t.ppf(0.975, 119)
    assert (r.lo, r.hi) == tuple(pytest.approx(b, rel=1e-4) for b in _wilson_bounds(r.rate, n_eff, z))


def test_a_confidence_of_one_half_or_less_spends_no_tail():
    # the one-sided bound is at 2c − 1: from c ≤ ½ there is none to take (no error either)
    r = clustered_rate([10, 10] + [0] * 14, [10] * 16, confidence=0.5)
    wide = clustered_rate([10, 10] + [0] * 14, [10] * 16)
    assert wide.lo <= r.lo <= r.rate <= r.hi <= wide.hi
