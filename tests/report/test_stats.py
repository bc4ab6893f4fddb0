"""The comparison statistics against values computed OUTSIDE the project: statsmodels
(0.15.0, run in a separate venv; the numbers are pasted with the call that made them),
scipy (called here) and brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from edv_ray.report.paired import (
    detectable_difference,
    paired_bootstrap,
    paired_comparison,
    sign_flip_test,
)
from edv_ray.report.stats import clustered_rate, pass_hat_k, wilson, z_value
from edv_ray.report.stats_planning import planned_detectable_difference, tasks_needed

# statsmodels.stats.proportion.proportion_confint(k, n, alpha=0.05, method="wilson")
WILSON_CASES = [
    (0, 10, 0.0, 0.277533), (5, 10, 0.236593, 0.763407), (10, 10, 0.722467, 1.0),
    (17, 20, 0.639581, 0.947631), (1, 3, 0.061492, 0.79234), (40, 40, 0.912378, 1.0),
    (26, 40, 0.495059, 0.778655), (20, 40, 0.351995, 0.648005),
]
# 14 tasks as (successes, episodes); the first 9 are domain A, the last 5 domain B
CLUSTERED = [(3, 3), (0, 3), (1, 3), (2, 3), (3, 3), (0, 3), (2, 3), (1, 3), (3, 3),
             (0, 2), (1, 2), (2, 2), (2, 3), (3, 3)]


def test_z_value_is_the_usual_1_96():
    assert z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert z_value(0.90) == pytest.approx(1.644854, abs=1e-6)


@pytest.mark.parametrize("s,n,lo,hi", WILSON_CASES)
def test_wilson_matches_statsmodels(s, n, lo, hi):
    r = wilson(s, n)
    assert (r.successes, r.n, r.rate) == (s, n, pytest.approx(s / n))
    assert (r.lo, r.hi) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6))
    # one episode per task: the clustered interval IS Wilson's
    c = clustered_rate([1] * s + [0] * (n - s), [1] * n)
    assert (c.lo, c.hi, c.method) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6),
                                      "wilson")


def test_wilson_edges_and_errors():
    empty = wilson(0, 0)
    assert empty.rate is None and (empty.lo, empty.hi) == (0.0, 1.0)
    for bad in ((11, 10), (-1, 10)):
        with pytest.raises(ValueError):
            wilson(*bad)
    assert wilson(5, 10, 0.99).lo < wilson(5, 10, 0.95).lo


def test_clustered_rate_matches_statsmodels_cluster_robust_variance():
    # sm.WLS(y, ones).fit(cov_type="cluster", cov_kwds={"groups": task}) on the 39 episodes:
    # p = 0.58974358974359, se = 0.10563239937877733 → n_eff = p(1-p)/se² = 21.683246915787578;
    # interval = proportion_confint(p·n', n', method="wilson") at Korn–Graubard's
    # n' = n_eff·(t_38/t_13)² (scipy.stats.t.ppf(0.975, df)): [0.3725707621375397,
    # 0.7767826980962579]
    s, m = zip(*CLUSTERED)
    r = clustered_rate(s, m)
    assert (r.rate, r.n, r.tasks, r.method) == (pytest.approx(23 / 39), 39, 14, "task-clustered")
    assert r.n_eff == pytest.approx(21.683246915787578, rel=1e-9)
    assert (r.lo, r.hi) == (pytest.approx(0.3725707621375397, abs=1e-9),
                            pytest.approx(0.7767826980962579, abs=1e-9))
    # the same 39 episodes as if independent: Wilson at n = 39 is narrower
    assert wilson(23, 39).hi - wilson(23, 39).lo < r.hi - r.lo


def test_clustered_mean_of_domains_matches_statsmodels_weighted():
    # weights 1/(2·n_d): WLS with those weights, clustered by task → p = 0.611111111111111,
    # n_eff = 21.338860103626953, interval (as above) [0.39023920830817205, 0.7941749232455391]
    s, m = zip(*CLUSTERED)
    n_a, n_b = sum(m[:9]), sum(m[9:])
    r = clustered_rate(s, m, weights=[1 / (2 * n_a)] * 9 + [1 / (2 * n_b)] * 5)
    assert r.rate == pytest.approx((15 / 27 + 8 / 12) / 2)  # the mean of the domain scores
    assert r.n_eff == pytest.approx(21.338860103626953, rel=1e-9)
    assert (r.lo, r.hi) == (pytest.approx(0.39023920830817205, abs=1e-9),
                            pytest.approx(0.7941749232455391, abs=1e-9))


def test_clustered_rate_at_the_boundary_counts_tasks_not_episodes():
    # 40 tasks × 2 runs, all solved: no more information than 40 tasks (ICC unknown)
    r = clustered_rate([2] * 40, [2] * 40)
    assert r.n_eff == 40 and r.rate == 1.0 and r.hi == 1.0
    # Wilson's bound at n_eff = 40, Korn–Graubard: z · t_39 / t_79 in place of z
    z = sps.norm.ppf(0.975) * sps.t.ppf(0.975, 39) / sps.t.ppf(0.975, 79)
    assert r.lo == pytest.approx(1 / (1 + z * z / 40))
    assert r.lo < wilson(80, 80).lo  # never the 80-independent-episodes interval


def test_pass_hat_k_small_cases():
    tasks = [(4, 2), (4, 4), (4, 0)]
    assert pass_hat_k(tasks, 1) == (pytest.approx(0.5), 3)
    assert pass_hat_k(tasks, 2) == (pytest.approx((1 / 6 + 1) / 3), 3)  # C(2,2)/C(4,2) = 1/6
    assert pass_hat_k(tasks, 3) == (pytest.approx(1 / 3), 3)
    assert pass_hat_k(tasks, 5) == (None, 0)
    assert pass_hat_k([(2, 1), (3, 3)], 3) == (pytest.approx(1.0), 1)
    with pytest.raises(ValueError):
        pass_hat_k([(2, 3)], 1)


@pytest.mark.parametrize("b,c", [(6, 0), (7, 1), (5, 5), (10, 3), (0, 1), (12, 4), (30, 18)])
def test_sign_flip_on_binary_outcomes_is_exact_two_sided_mcnemar(b, c):
    d = [1] * b + [-1] * c + [0] * 9  # ties do not count
    p, how = sign_flip_test(d)
    assert how == "exact"
    assert p == pytest.approx(sps.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue,
                              abs=1e-12)


def test_sign_flip_on_task_means_matches_scipy_exact_permutation_test():
    rng = np.random.default_rng(5)
    for _ in range(5):
        d = rng.integers(-3, 4, size=11) / 3  # differences of means over 3 trials
        d[0] += 1 / 3 if abs(d.sum()) < 1e-9 else 0  # scipy's float ties at 0 differ; p = 1
        want = sps.permutation_test((d,), np.mean, permutation_type="samples",
                                    n_resamples=np.inf, alternative="two-sided").pvalue
        assert sign_flip_test(d)[0] == pytest.approx(want, abs=1e-12)


def test_sign_flip_with_weights_matches_brute_force():
    d = [1, 1, 0.5, -1, 1, 0, 1, -0.5]
    w = [1 / 10] * 5 + [1 / 6] * 3  # two domains of 5 and 3 tasks, mean of domain means
    obs = abs(sum(x * y for x, y in zip(d, w)))
    flips = [abs(sum(s * x * y for s, x, y in zip(signs, d, w)))
             for signs in itertools.product((-1, 1), repeat=len(d))]
    want = sum(f >= obs - 1e-12 for f in flips) / len(flips)
    assert sign_flip_test(d, w)[0] == pytest.approx(want, abs=1e-12)


def test_paired_bootstrap_is_paired_and_matches_scipy():
    # B varies by task (easy / hard tasks), A = B plus 8 gains and 2 losses: the paired
    # interval sees only the differences; an unpaired one would be ~1.8× wider
    b = np.array([1.0] * 30 + [0.0] * 30)
    a = b.copy()
    a[30:38] = 1.0
    a[:2] = 0.0
    d = a - b
    diff, lo, hi = paired_bootstrap(d, n_boot=20_000, seed=3)
    ref = sps.bootstrap((d,), np.mean, method="percentile", confidence_level=0.95,
                        n_resamples=20_000, random_state=3).confidence_interval
    assert diff == pytest.approx(0.1)
    assert lo == pytest.approx(ref.low, abs=0.012) and hi == pytest.approx(ref.high, abs=0.012)
    se_unpaired = math.sqrt(a.var() / 60 + b.var() / 60)
    assert hi - lo < 0.7 * 2 * 1.96 * se_unpaired


def test_paired_bootstrap_within_strata_keeps_the_domain_weights():
    d = [1.0] * 10 + [0.0] * 10 + [0.0] * 5
    w = [1 / 40] * 20 + [1 / 10] * 5  # domain A (20 tasks) and B (5 tasks), each half
    strata = ["A"] * 20 + ["B"] * 5
    diff, lo, hi = paired_bootstrap(d, w, strata, n_boot=4000, seed=1)
    assert diff == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert 0.25 - 0.12 < lo < 0.25 < hi < 0.25 + 0.12 and hi <= 0.5


def test_the_issue_example_26_of_40_vs_20_of_40():
    # EDV solves 6 tasks No-Memory fails and loses none: +0.150, exact McNemar p = 1/32
    a = {i: [1 if i < 26 else 0] for i in range(40)}
    b = {i: [1 if i < 20 else 0] for i in range(40)}
    r = paired_comparison(a, b, n_boot=10_000, seed=0)
    assert r.diff == pytest.approx(0.15) and (r.tasks, r.differing) == (40, 6)
    assert r.p == pytest.approx(sps.binomtest(6, 6).pvalue) == pytest.approx(0.03125)
    # cluster-robust t: s/√40 with s² = 40/39 · 0.15 · 0.85, df = 3 per differing task = 18
    half = sps.t.ppf(0.975, 18) * math.sqrt(40 / 39 * 0.15 * 0.85 / 40)
    assert (r.lo, r.hi) == (pytest.approx(0.15 - half), pytest.approx(0.15 + half))
    assert r.detectable == pytest.approx(0.1666, abs=0.001)


def test_too_few_tasks_gives_no_interval_but_an_exact_p():
    a = {i: [1] for i in range(3)}
    b = {i: [0] for i in range(3)}
    r = paired_comparison(a, b)
    assert r.lo is None and r.hi is None and "too few tasks" in r.why
    assert r.p == pytest.approx(0.25)  # 2 · (1/2)³, not 0
    few_differ = paired_comparison({i: [int(i < 3)] for i in range(30)}, {i: [0] for i in range(30)})
    assert few_differ.lo is None and "differ" in few_differ.why


def test_detectable_difference_has_80_percent_power_by_simulation():
    # paired binary outcomes, discordant share psi: at the detectable difference the exact
    # McNemar test (scipy) at two-sided 5 % rejects in about 80 % of experiments
    n, psi = 80, 0.3
    d = [1] * 12 + [-1] * 12 + [0] * 56  # observed discordance 24/80 = 0.3
    delta = detectable_difference(d)
    assert 0.15 < delta < 0.25
    rng = np.random.default_rng(11)
    up, down = (psi + delta) / 2, (psi - delta) / 2
    hits = 0
    for _ in range(3000):
        u = rng.random(n)
        bb, cc = int((u < up).sum()), int(((u >= up) & (u < up + down)).sum())
        hits += bb + cc > 0 and sps.binomtest(bb, bb + cc, 0.5).pvalue < 0.05
    assert 0.74 < hits / 3000 < 0.86
    assert detectable_difference([0] * 10) is None  # no task differs: nothing to say
    assert detectable_difference([1, -1, 1]) is None  # three tasks cannot reach 5 %


def test_planning_a_3_point_gap_needs_hundreds_to_thousands_of_tasks():
    # Connor's n = (1.959964·√ψ + 0.841621·√(ψ − δ²))² / δ², by hand for δ = 0.03:
    # ψ = 0.1: (0.619795 + 0.264944)² / 0.0009 = 869.7 → 870; ψ = 0.3: 2,613.9 → 2,614
    assert tasks_needed(0.03, 0.1) == 870
    assert tasks_needed(0.03, 0.3) == 2614
    # and back: that many tasks detect 0.03 (the observed-data version agrees)
    assert planned_detectable_difference(870, 0.1) == pytest.approx(0.03, abs=2e-5)
    d = [1] * 87 + [-1] * 0 + [0] * 783  # 87 discordant of 870 tasks
    assert detectable_difference(d) == pytest.approx(planned_detectable_difference(870, 0.1))
    with pytest.raises(ValueError):
        tasks_needed(0.5, 0.3)  # a difference larger than the discordant share
