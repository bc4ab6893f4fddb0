"""Hand-computed checks of the comparison statistics."""

from __future__ import annotations

import math

import pytest

from edv_ray.report.stats import (
    intervals_overlap,
    paired_bootstrap,
    pass_hat_k,
    wilson,
    z_value,
)

# Wilson 95 % bounds worked out by hand from (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
# with z = 1.959964 (z² = 3.841459); they agree with published Wilson tables to 4 places.
# e.g. 0/10: denom = 1.3841459, centre = half = 0.1920730 / 1.3841459 = 0.138767 → hi 0.277533.
WILSON_CASES = [
    (0, 10, 0.0, 0.277533),
    (5, 10, 0.236593, 0.763407),
    (10, 10, 0.722467, 1.0),
    (17, 20, 0.639581, 0.947631),
    (1, 3, 0.061492, 0.792340),
]


def test_z_value_is_the_usual_1_96():
    assert z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert z_value(0.90) == pytest.approx(1.644854, abs=1e-6)


@pytest.mark.parametrize("s,n,lo,hi", WILSON_CASES)
def test_wilson_matches_hand_computed_bounds(s, n, lo, hi):
    r = wilson(s, n)
    assert r.rate == pytest.approx(s / n)
    assert (r.successes, r.n) == (s, n)
    assert r.lo == pytest.approx(lo, abs=2e-6)
    assert r.hi == pytest.approx(hi, abs=2e-6)


def test_wilson_edges_and_errors():
    assert wilson(0, 10).lo == 0.0 and wilson(10, 10).hi == 1.0
    empty = wilson(0, 0)
    assert empty.rate is None and (empty.lo, empty.hi) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(11, 10)
    with pytest.raises(ValueError):
        wilson(-1, 10)
    # a wider confidence gives a wider interval
    assert wilson(5, 10, 0.99).lo < wilson(5, 10, 0.95).lo


def test_intervals_overlap():
    assert intervals_overlap((0.1, 0.5), (0.4, 0.9))
    assert intervals_overlap((0.4, 0.9), (0.1, 0.5))
    assert intervals_overlap((0.1, 0.5), (0.5, 0.9))  # touching counts as overlap
    assert intervals_overlap((0.0, 1.0), (0.3, 0.4))  # containment
    assert not intervals_overlap((0.1, 0.3), (0.31, 0.9))
    assert not intervals_overlap((0.6, 0.9), (0.1, 0.5))


def test_pass_hat_k_small_cases():
    tasks = [(4, 2), (4, 4), (4, 0)]
    # k=1 is the mean success rate: (2/4 + 4/4 + 0) / 3
    assert pass_hat_k(tasks, 1) == (pytest.approx(0.5), 3)
    # k=2: C(2,2)/C(4,2) = 1/6, C(4,2)/C(4,2) = 1, 0 → (1/6 + 1) / 3 = 7/18
    assert pass_hat_k(tasks, 2) == (pytest.approx(7 / 18), 3)
    # k=3: C(2,3) = 0, 1, 0 → 1/3
    assert pass_hat_k(tasks, 3) == (pytest.approx(1 / 3), 3)
    assert pass_hat_k(tasks, 5) == (None, 0)
    # a task with fewer than k trials is left out: only (3, 3) has 3 trials
    assert pass_hat_k([(2, 1), (3, 3)], 3) == (pytest.approx(1.0), 1)
    # (5 trials, 3 successes), k=2: C(3,2)/C(5,2) = 3/10
    assert pass_hat_k([(5, 3)], 2) == (pytest.approx(0.3), 1)
    with pytest.raises(ValueError):
        pass_hat_k([(2, 3)], 1)


def test_bootstrap_identical_methods_gives_zero():
    a = {("retail", str(i)): [i % 2, (i // 2) % 2] for i in range(30)}
    r = paired_bootstrap(a, dict(a), n_boot=2000, seed=1)
    assert r.diff == 0.0
    assert r.lo <= 0.0 <= r.hi
    assert not r.excludes_zero
    assert r.p == 1.0 and r.tasks == 30


def test_bootstrap_strictly_better_on_every_task_excludes_zero():
    b = {("airline", str(i)): [0.0] for i in range(25)}
    a = {k: [1.0, 1.0 if i % 3 else 0.0] for i, k in enumerate(sorted(b))}
    r = paired_bootstrap(a, b, n_boot=2000, seed=2)
    # every per-task difference is 1 or 0.5, so every resampled mean is > 0
    assert r.lo > 0 and r.excludes_zero and r.p == 0.0
    # the mirror image is strictly worse
    m = paired_bootstrap(b, a, n_boot=2000, seed=2)
    assert m.hi < 0 and m.diff == pytest.approx(-r.diff)


def test_bootstrap_averages_trials_within_a_task_first():
    a = {"t1": [1, 1, 1, 1], "t2": [0]}
    b = {"t1": [0], "t2": [0]}
    # per task: t1 1.0, t2 0.0 → mean 0.5 (pooling the five trials would give 0.8)
    assert paired_bootstrap(a, b, n_boot=200).diff == pytest.approx(0.5)
    # numbers are accepted as already-averaged task scores
    assert paired_bootstrap({"t": 0.75}, {"t": 0.25}, n_boot=50).diff == pytest.approx(0.5)


def test_bootstrap_interval_matches_normal_approximation():
    # 200 tasks, half with difference 1, half 0: mean 0.5, SE = 0.5 / sqrt(200) = 0.035355,
    # so the 95 % interval is about 0.5 ± 1.96 · 0.035355 = [0.4307, 0.5693].
    a = {i: [1.0 if i % 2 else 0.0] for i in range(200)}
    b = {i: [0.0] for i in range(200)}
    r = paired_bootstrap(a, b, n_boot=20_000, seed=3)
    half = 1.959964 * 0.5 / math.sqrt(200)
    assert r.diff == pytest.approx(0.5)
    assert r.lo == pytest.approx(0.5 - half, abs=0.01)
    assert r.hi == pytest.approx(0.5 + half, abs=0.01)


def test_bootstrap_is_seeded_and_reports_unpaired_tasks():
    a = {i: [float(i % 3 == 0)] for i in range(40)}
    b = {i: [float(i % 2 == 0)] for i in range(5, 45)}
    r1 = paired_bootstrap(a, b, n_boot=500, seed=7)
    r2 = paired_bootstrap(a, b, n_boot=500, seed=7)
    assert r1 == r2
    assert (r1.tasks, r1.only_a, r1.only_b) == (35, 5, 5)
    none = paired_bootstrap({"x": [1]}, {"y": [0]})
    assert none.diff is None and none.tasks == 0 and not none.excludes_zero
