"""Check 6 (fast): edv compare's 95 % intervals — Pass@1 cells and paired differences —
cover the planted truth 93-97 % of the time over 1,000 planted outcome tables."""

from __future__ import annotations

from edv_ray.validation.coverage import planted_coverage, planted_tables


def test_intervals_cover_the_planted_truth():
    rows = planted_coverage(1000, n_boot=2000)
    assert [r.check.split(" ")[0] for r in rows] == ["6a", "6b", "6c"]
    for r in rows:
        assert r.ok, (r.check, r.measured)


def test_planted_tables_hold_what_was_planted():
    t = planted_tables(reps=400, tasks=20, trials=2, delta=0.2, seed=1).to_pylist()
    for method, want in (("no_memory", 0.5), ("edv", 0.6)):
        got = [r["success"] for r in t if r["method"] == method]
        assert abs(sum(got) / len(got) - want) < 0.01
