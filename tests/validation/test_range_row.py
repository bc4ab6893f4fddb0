"""The profile-only range rows (issue 27 item 1): a measurement is checked against the
distribution the Monte Carlo predicts for a run of the design — and the design is read from
the world's config, not from a run."""

from __future__ import annotations

import numpy as np

from edv_ray.validation.checks import level, predicted, range_row
from edv_ray.validation.suite import expect_for
from edv_ray.validation.worlds import load_world


def test_a_measurement_inside_the_predicted_range_passes_and_outside_fails():
    sims = predicted(np.full(400, 0.5), 40)
    assert range_row("x", [("a", sims, 0.5)]).ok is True
    assert range_row("x", [("a", sims, 0.95)]).ok is False
    assert range_row("x", [("a", sims, None)]).ok is False  # nothing measured: a failure
    # a cell of several: each at the row's Bonferroni level, every one must lie inside
    assert range_row("x", [("a", sims, 0.5), ("b", sims, 0.05)]).ok is False


def test_the_repetitions_spread_widens_the_range():
    """A bank that varies from run to run (half the repetitions 0.2, half 0.9) gives a
    range that holds both; the binomial of 40 episodes alone would not."""
    both = predicted(np.r_[np.full(200, 0.2), np.full(200, 0.9)], 40)
    row = range_row("x", [("a", both, 0.2)])
    assert row.ok is True and range_row("x", [("a", both, 0.9)]).ok is True
    one = predicted(np.full(400, 0.2), 40)
    assert range_row("x", [("a", one, 0.9)]).ok is False
    # the range is the central 1 − 0.05/FAMILY of the draws
    q = (1 - level(1)) / 2
    assert row.figures["cells"][0]["lo"] == np.quantile(both, q)


def test_the_design_comes_from_the_worlds_config():
    """Tasks per domain as the config's ids select them (τ²-bench ids are shared across
    domains, so a domain may get a little more than the size names) and trials counted in
    the test episodes."""
    w = load_world("gains", "fast")
    design = w.design()
    ex = expect_for(w)
    assert design.domains == ["airline", "retail"] and design.trials == 2
    assert design.n_train["airline"] >= 16 and design.n_test["retail"] >= 15
    assert ex.n_test("airline") == 2 * design.n_test["airline"]
    assert ex.domains == sorted(design.domains)
