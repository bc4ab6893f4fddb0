"""Check 6 (fast): edv compare's 95 % intervals — Pass@1 cells and paired differences —
cover the planted truth 93-97 % of the time over 1,000 planted outcome tables."""

from __future__ import annotations

import numpy as np
import pytest

from edv_ray.report.stats import clustered_rate, wilson
from edv_ray.validation.coverage import (coverage_row, exact_cell_coverage, planted_coverage,
                                         planted_tables)


def test_intervals_cover_the_planted_truth():
    rows = planted_coverage(1000, n_boot=2000)
    assert [r.check.split(" ")[0] for r in rows] == ["6a", "6b", "6c"]
    for r in rows:  # at 1,000 repetitions the observed share itself must lie in the band
        assert r.ok and not r.outside95, (r.check, r.measured)


def test_coverage_verdict_allows_for_the_repetitions_sampling_error():
    """200 repetitions of a correct interval land outside 0.93-0.97 about one time in five:
    the verdict asks whether the observed share is consistent with the band."""
    assert coverage_row("x", 190, 200, "0.6", "").verdict == "PASS"
    assert coverage_row("x", 197, 200, "0.6", "").verdict == "PASS*"  # 0.985, consistent
    assert coverage_row("x", 160, 200, "0.6", "").verdict == "FAIL"  # 0.80: under-covers
    assert coverage_row("x", 3940, 4000, "0.6", "").verdict == "FAIL"  # 0.985 ± 0.006
    assert coverage_row("x", 3600, 4000, "0.6", "").verdict == "FAIL"  # 0.90 at 4,000


@pytest.mark.parametrize("kappa", [None, 1.0])
def test_exact_cell_coverage_equals_a_plain_simulation(kappa):
    rng = np.random.default_rng(3)
    p, tasks, trials, reps = 0.6, 5, 4, 20_000
    u = p if kappa is None else rng.beta(p * kappa, (1 - p) * kappa, (reps, tasks, 1))
    wins = (rng.random((reps, tasks, trials)) < u).sum(axis=2)
    hits = 0
    for row in wins:
        r = clustered_rate(row.tolist(), [trials] * tasks)
        hits += r.lo <= p <= r.hi
    assert abs(exact_cell_coverage(p, tasks, trials, kappa) - hits / reps) < 0.01


def test_ignoring_the_clustering_of_spread_tasks_under_covers():
    """The coverage world's fast design (5 tasks × 10 trials, rates ~ Beta(0.6, 0.4)):
    the clustered interval covers ~0.95, one that treats the 50 episodes as independent
    ~0.56 — why check 6d there catches the clustering mutants."""
    rng = np.random.default_rng(5)
    p, tasks, trials, reps = 0.6, 5, 10, 4000
    wins = rng.binomial(trials, rng.beta(0.6, 0.4, (reps, tasks)))
    naive = np.mean([wilson(int(w.sum()), tasks * trials).lo <= p <= wilson(int(w.sum()), tasks * trials).hi
                     for w in wins])
    assert naive < 0.62 and exact_cell_coverage(p, tasks, trials, 1.0) > 0.94


def test_planted_tables_hold_what_was_planted():
    t = planted_tables(reps=400, tasks=20, trials=2, delta=0.2, seed=1).to_pylist()
    for method, want in (("no_memory", 0.5), ("edv", 0.6)):
        got = [r["success"] for r in t if r["method"] == method]
        assert abs(sum(got) / len(got) - want) < 0.01
