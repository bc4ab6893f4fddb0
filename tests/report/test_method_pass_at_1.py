"""``method_pass_at_1`` (the run's own Pass@1 view) counts errored episodes as failures: a
run folder with 5 solved, 3 failed and 2 errored episodes is 5/10, not 5/8."""

from __future__ import annotations

import pytest

from edv_ray.results.views import connect
from tests.report.runfolder import config, episode, write_run


def test_errors_are_failures_in_method_pass_at_1(tmp_path):
    eps = [episode("r", "eval", "a", "retail", f"t{i}", i < 5) for i in range(8)]
    eps += [episode("r", "eval", "a", "retail", f"t{i}", False, status="error") for i in (8, 9)]
    run = write_run(tmp_path / "r", config("r", ["no_memory"], agents=("a",)), episodes=eps,
                    test_tasks=[("retail", f"t{i}") for i in range(10)])
    (row,) = connect(run).execute(
        "SELECT n, errors, successes, pass_at_1, ci_low, ci_high FROM method_pass_at_1").fetchall()
    # statsmodels proportion_confint(5, 10, method="wilson") = (0.236593, 0.763407)
    assert row[:4] == (10, 2, 5, pytest.approx(0.5))
    assert row[4:] == (pytest.approx(0.236593, abs=1e-6), pytest.approx(0.763407, abs=1e-6))
