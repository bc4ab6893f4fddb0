"""The mutation table's mutants (issue 27): each applies to the tree as it is (a refactor
that moves the mutated code fails here, not silently in the table), compiles, and the
table catches a CI subset through planted-vs-measured rows."""

from __future__ import annotations

import json
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from edv_ray.validation import suite
from edv_ray.validation.mutants import BY_NAME, MUTANTS, Mutant, StaleMutant, apply, framework_own

ROOT = Path(__file__).resolve().parents[2]
NAMED = {"retrieval_nothing", "retrieval_random", "votes_ignored", "banks_swapped", "majority", "distiller_in_group",
         "grades_inverted", "selector_random", "selector_worst", "contamination_halved",
         "poison_wrong_domain", "clustering_ignored_domain", "clustering_ignored",
         "ninety_percent", "seeds_collapsed", "rb_stale", "judge_sees_rewards", "agents_mixed",
         "prompt_strategy_ignored"}


def test_the_table_holds_every_named_bug_of_the_issue():
    assert NAMED <= set(BY_NAME) and len(MUTANTS) >= 12
    for m in MUTANTS:
        assert m.worlds and set(m.worlds) <= set(suite.WORLDS["fast"])
        # framework code only: never the planted world (engine) nor the suite's own checks
        assert all(p.startswith("edv_ray/") and not p.startswith(("edv_ray/simulation/",
                                                                   "edv_ray/validation/"))
                   for p, _o, _n in m.edits), m.name


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_mutant_applies_once_changes_the_code_and_compiles(name, tmp_path):
    m = BY_NAME[name]
    dest = apply(m, ROOT, tmp_path / "src")
    for path, old, new in m.edits:
        text = (dest / path).read_text()
        assert new in text and old != new
        assert text != (ROOT / path).read_text()
        py_compile.compile(str(dest / path), doraise=True)
    # the rest of the tree is copied as it is
    assert (dest / "experiments/validation/run.py").read_text() == \
        (ROOT / "experiments/validation/run.py").read_text()


def test_a_mutant_whose_code_moved_fails_loudly(tmp_path):
    stale = Mutant("gone", "x", (("edv_ray/report/stats.py", "no such text anywhere", "y"),), ("coverage",))
    with pytest.raises(StaleMutant, match="0 times"):
        apply(stale, ROOT, tmp_path / "src")
    assert not (tmp_path / "src").exists()  # nothing copied


def test_framework_own_rows_are_told_apart():
    assert framework_own("0  validity checks of the main run")
    assert not framework_own("0  engine realises its plan (main)")
    assert not framework_own("2f EDV admission")


@pytest.mark.slow
def test_ci_subset_is_caught_by_planted_rows(tmp_path):
    """The table's CI subset: two interval bugs (planted outcome tables and the coverage
    world's run), grades inverted in the stage prompts (the main world; caught only
    because the engine's roles act on the grade they are shown) and a retriever that ranks
    at random (the relevance world: an item helps only tasks of its own kind)."""
    names = ["ninety_percent", "clustering_ignored_domain", "grades_inverted", "retrieval_random"]
    rc = subprocess.run([sys.executable, str(ROOT / "experiments/validation/mutants.py"), "--only",
                         *names, "--worlds", "main", "coverage", "relevance", "--out", str(tmp_path)],
                        cwd=ROOT).returncode
    got = {r["name"]: r for r in json.loads((tmp_path / "mutants.json").read_text())}
    assert rc == 0, {n: (r["verdict"], r["rows"]) for n, r in got.items()}
    assert all(got[n]["verdict"] == "caught" for n in names)
    # the planted tables and the coverage world's whole-framework run (tasks not alike)
    assert {c[:2] for c in got["clustering_ignored_domain"]["rows"]} >= {"6b", "6d"}
    assert any(c.startswith("3e") for c in got["retrieval_random"]["rows"])
    assert "| `grades_inverted` | grades inverted in the distiller's and verifiers' prompts | main |" \
        in (tmp_path / "mutants.md").read_text()


def test_a_refused_run_is_read_from_the_suite_log():
    from edv_ray.validation.mutants import refused

    log = "world main (fast) …\nRuntimeError: validation world main: the run did not complete (4 errored)\n"
    assert "4 errored" in refused(log)
    assert refused("world main (fast) …\n12 passed, 0 failed\n") is None
