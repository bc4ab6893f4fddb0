"""Each verdict row states the smallest bias it detects with 80 % power at its size
(issue 27): the figure is checked against a simulation of the row's own verdict."""

from __future__ import annotations

import numpy as np

from edv_ray.report.paired import PairedDiff
from edv_ray.report.stats import clustered_rate
from edv_ray.validation.checks import (
    Row,
    again,
    detectable,
    diff_row,
    rate_row,
    sensitivity_summary,
)


def test_a_bias_of_the_stated_size_fails_the_verdict_80_percent_of_the_time():
    """Cells of 40 tasks × 3 trials at a true rate 0.5 + δ, planted 0.5: the share of
    repetitions whose rate row fails is ~0.80 at the δ the row states."""
    rng = np.random.default_rng(3)
    tasks, trials, planted = 40, 3, 0.5

    def row(p_true: float) -> Row:
        u = np.clip(rng.beta(4, 4, tasks) + (p_true - 0.5), 0, 1)
        succ = rng.binomial(trials, u)
        return rate_row("x", planted, lambda conf: clustered_rate(succ, [trials] * tasks, confidence=conf))

    stated = float(np.median([row(planted).detects for _ in range(200)]))
    assert 0.1 < stated < 0.4
    fails = [row(planted + stated).ok is False for _ in range(600)]
    assert 0.72 <= float(np.mean(fails)) <= 0.88, np.mean(fails)
    # a correct framework (no bias) fails the row almost never (the suite's level)
    assert float(np.mean([row(planted).ok is False for _ in range(300)])) < 0.02


def test_the_sensitivity_is_printed_absolute_and_relative():
    r = Row("x", "0.500", "m", True, figures={"planted": 0.5}, detects=0.1)
    assert r.sensitivity == "±0.100 (20%)"
    assert Row("x", "0", "m", True, figures={"planted": 0.0}, detects=0.1).sensitivity == "±0.100"
    assert Row("x", "0", "m", None).sensitivity == "—"
    # wider intervals (more cells in the row: a stricter level) detect only larger biases
    assert detectable(0.4, 0.6, cells=4) > detectable(0.4, 0.6) > detectable(0.45, 0.55)


def test_the_summary_names_the_rows_that_meet_20_percent_and_what_the_others_need():
    rows = [Row("1c Router", "", "", True, figures={"planted": 0.85}, detects=0.148),  # 17 %
            Row("4d drop", "", "", True, figures={"planted": 0.12}, detects=0.06),  # 50 %: ×6.25
            Row("3b null", "", "", True, figures={"planted": 0.0}, detects=0.2),
            Row("2f· votes", "", "", True)]
    s = sensitivity_summary(rows)
    assert s.startswith("sensitivity: 1 of 2 rows detect a 20 % relative bias with 80 % power (1c)")
    assert "need this much more data: 4d ×6.2" in s and "planted near 0 (absolute): 3b ±0.200" in s
    assert "2f·" not in s and "By check" not in s
    # a check also run in the construction world ("+") is met when either row meets it
    rows += again([Row("4d drop", "", "", True, figures={"planted": 0.12}, detects=0.012),  # 10 %
                   Row("2a audit", "", "", True, figures={"planted": 0.6}, detects=0.3)], "other")
    assert [r.check for r in rows[-2:]] == ["4d+ drop (other world)", "2a+ audit (other world)"]
    s = sensitivity_summary(rows)
    assert s.startswith("sensitivity: 2 of 4 rows") and s.endswith("By check (either world's row): "
                                                                  "2 of 3 detect it; not: 2a")


def test_a_difference_row_with_a_planted_range_passes_when_its_interval_meets_it():
    def fn(lo, hi):
        return lambda conf: PairedDiff((lo + hi) / 2, lo, hi, None, "", None, 50, 40, 0, 0, 0, 0)
    assert diff_row("4b x", (0.09, 0.14), fn(0.03, 0.095)).ok is True
    assert diff_row("4b x", (0.09, 0.14), fn(0.02, 0.08)).ok is False
    row = diff_row("4b x", (0.09, 0.14), fn(0.10, 0.12))
    assert row.ok is True and row.planted == "+0.090 to +0.140" and abs(row.figures["planted"] - 0.115) < 1e-12
    # a bias of the midpoint is seen only outside the range: half its width on top
    point = diff_row("4b x", 0.115, fn(0.10, 0.12))
    assert abs(row.detects - point.detects - 0.025) < 1e-12
