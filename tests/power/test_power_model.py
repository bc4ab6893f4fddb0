"""``edv power``'s Monte Carlo against calculations made here, apart from it (scipy):

1. one trial per task, one domain: the exact power of McNemar's test (binomial on the
   discordant tasks) and of its normal approximation, by enumerating the discordant
   counts, with the pair probabilities from the bivariate normal (the latent model);
2. three trials per task, two domains of unequal size, task and agent heterogeneity:
   the paired-difference normal formula, each task's E[d] and E[d²] integrated over the
   task's latent difficulty (Gauss–Hermite) in closed form given it.

Each simulated power must lie within 4 Monte Carlo standard errors (plus, for the
formula, its own approximation error) of the calculation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from edv_ray.power.model import (
    Arm,
    Design,
    Heterogeneity,
    Method,
    formula_tasks,
    simulate_power,
    tasks_for_power,
)

Z = sps.norm.ppf(0.975)


def phi2(x: float, y: float, r: float) -> float:
    if r == 0:
        return sps.norm.cdf(x) * sps.norm.cdf(y)
    return float(sps.multivariate_normal(mean=[0, 0], cov=[[1, r], [r, 1]]).cdf([x, y]))


def mcnemar_power(g: int, p10: float, p01: float, exact: bool) -> float:
    """P(reject with the sign of p10 − p01) over g tasks, enumerated exactly."""
    psi = p10 + p01
    total = 0.0
    for n in range(g + 1):
        pn = sps.binom.pmf(n, g, psi)
        if pn < 1e-15 or n == 0:
            continue
        b = np.arange(n + 1)  # tasks where A solves and B does not
        if exact:
            p = np.minimum(1.0, 2 * sps.binom.cdf(np.minimum(b, n - b), n, 0.5))
            rej = p < 0.05
        else:
            rej = np.abs(2 * b - n) > Z * math.sqrt(n)
        rej &= (2 * b - n) * np.sign(p10 - p01) > 0
        total += pn * float(sps.binom.pmf(b, n, p10 / psi)[rej].sum())
    return total


@pytest.mark.parametrize("test", ["exact", "normal"])
def test_one_trial_matches_mcnemar_power(test):
    pa, pb, rho, tau, g = 0.80, 0.62, 0.4, 0.2, 60
    a = Method("A", {"t": (Arm("x", pa),)})
    b = Method("B", {"t": (Arm("y", pb),)})  # another agent: episodes correlate by ρ only
    design = Design(tuple(("d", "t") for _ in range(g)), trials=1)
    sim = simulate_power(a, b, design, Heterogeneity(rho, tau), reps=4000, seed=3, test=test)
    p11 = phi2(sps.norm.ppf(pa), sps.norm.ppf(pb), rho)
    expected = mcnemar_power(g, pa - p11, pb - p11, exact=test == "exact")
    se = math.sqrt(expected * (1 - expected) / sim.reps)
    assert 0.3 < expected < 0.9  # a design where power is informative
    assert abs(sim.power - expected) < 4 * se, (sim.power, expected, se)
    assert abs(sim.planted - (pa - pb)) < 1e-12


def test_same_agent_correlation_raises_power():
    """Two methods acting through the same agent share its per-task latent (ρ + τ), so
    fewer tasks differ: the exact calculation and the simulation both see it."""
    pa, pb, rho, tau, g = 0.80, 0.70, 0.3, 0.4, 80
    a, b = Method("A", {"t": (Arm("x", pa),)}), Method("B", {"t": (Arm("x", pb),)})
    design = Design(tuple(("d", "t") for _ in range(g)), trials=1)
    sim = simulate_power(a, b, design, Heterogeneity(rho, tau), reps=4000, seed=5, test="exact")
    p11 = phi2(sps.norm.ppf(pa), sps.norm.ppf(pb), rho + tau)
    expected = mcnemar_power(g, pa - p11, pb - p11, exact=True)
    other = mcnemar_power(g, pa - phi2(sps.norm.ppf(pa), sps.norm.ppf(pb), rho),
                          pb - phi2(sps.norm.ppf(pa), sps.norm.ppf(pb), rho), exact=True)
    assert expected > other + 0.1
    assert abs(sim.power - expected) < 4 * math.sqrt(expected * (1 - expected) / sim.reps)


def task_moments(pa, pb, rho, tau, trials, nodes=60):
    """E[d], E[d²] of one task's score difference (different agents), integrated over the
    task's difficulty U: given U, each agent's episode succeeds with c = (a − √ρU)/√(1−ρ)
    marginally over its own V, and two of its episodes both with Φ₂(c, c; τ/(1−ρ))."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    r_in = tau / (1 - rho)
    ed = ed2 = 0.0
    for u, wu in zip(x, w):
        m, m2 = [], []
        for p in (pa, pb):
            c = (sps.norm.ppf(p) - math.sqrt(rho) * u) / math.sqrt(1 - rho)
            q1, q2 = sps.norm.cdf(c), phi2(c, c, r_in)
            m.append(q1)
            m2.append(q1 / trials + (1 - 1 / trials) * q2)  # E[score²]
        ed += wu * (m[0] - m[1])
        ed2 += wu * (m2[0] - 2 * m[0] * m[1] + m2[1])
    return ed, ed2


def test_trials_and_domains_match_the_paired_difference_formula():
    rho, tau, trials = 0.35, 0.25, 3
    rates = {"air": (0.70, 0.60), "ret": (0.85, 0.78)}
    counts = {"air": 80, "ret": 160}
    a = Method("A", {k: (Arm("x", pa),) for k, (pa, _) in rates.items()})
    b = Method("B", {k: (Arm("y", pb),) for k, (_, pb) in rates.items()})
    design = Design(tuple((k, k) for k, n in counts.items() for _ in range(n)), trials)
    sim = simulate_power(a, b, design, Heterogeneity(rho, tau), reps=4000, seed=11)
    mu = v0 = v1 = 0.0
    for k, n in counts.items():
        ed, ed2 = task_moments(*rates[k], rho, tau, trials)
        w = 1 / (len(counts) * n)
        mu += n * w * ed
        v0 += n * w * w * ed2
        v1 += n * w * w * (ed2 - ed * ed)
    expected = sps.norm.cdf((mu - Z * math.sqrt(v0)) / math.sqrt(v1))
    se = math.sqrt(expected * (1 - expected) / sim.reps)
    assert 0.3 < expected < 0.9
    assert abs(sim.planted - mu) < 1e-6  # the planted difference is the latent model's mean
    assert abs(sim.power - expected) < 4 * se + 0.01, (sim.power, expected)


def test_tasks_needed_reach_the_target_and_fewer_do_not():
    a, b = Method("A", {"t": (Arm("x", 0.75),)}), Method("B", {"t": (Arm("x", 0.6),)})
    base = Design((("d", "t"),) * 10, 1)
    het = Heterogeneity(0.3, 0.2)
    n, res = tasks_for_power(a, b, base, 2, het, reps=1500, seed=1)
    assert res.power >= 0.8 and res.design.trials == 2 and len(res.design.tasks) == n
    below = simulate_power(a, b, base.scaled(int(n * 0.9), 2), het, reps=1500, seed=1)
    assert below.power < 0.8
    guess = formula_tasks(a, b, base, 2, het)
    assert 0.85 * n < guess < 1.15 * n  # the normal formula agrees with the search


def test_seeded_and_null_difference_gives_the_size():
    a, b = Method("A", {"t": (Arm("x", 0.7),)}), Method("B", {"t": (Arm("y", 0.7),)})
    design = Design((("d", "t"),) * 50, 2)
    het = Heterogeneity(0.5, 0.1)
    r1 = simulate_power(a, b, design, het, reps=3000, seed=9)
    r2 = simulate_power(a, b, design, het, reps=3000, seed=9)
    assert r1.detected == r2.detected and r1.planted == 0
    assert 0.03 < r1.power < 0.08  # two-sided 5 %: either sign counts when nothing is planted
    assert tasks_for_power(a, b, design, 1, het) == (None, None)


def test_scaled_design_keeps_domain_and_type_mix():
    base = Design((("air", "x"),) * 20 + (("ret", "y"), ("ret", "z")) * 20, 1)
    big = base.scaled(300, 4)
    assert big.trials == 4 and len(big.tasks) == 300
    assert sum(1 for d, _ in big.tasks if d == "air") == 100
    assert sum(1 for _, k in big.tasks if k == "z") == 100
    w = big.weights()
    assert abs(w.sum() - 1) < 1e-12 and abs(w[0] - 1 / 200) < 1e-12
