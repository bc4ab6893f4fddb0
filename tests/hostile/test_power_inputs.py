"""Hostile inputs to ``edv power``: each bad input exits 2 with ONE line on stderr naming
what is wrong, before any simulation; nothing is written anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edv_ray.cli import main
from tests.hostile.test_sweep_inputs import refused as refused_argv
from tests.power.test_power_sources import sim_config
from tests.report.runfolder import config, episode, write_run


def refused(args, capsys, *needles) -> str:
    return refused_argv(capsys, ["power", *map(str, args)], *needles)


@pytest.fixture
def profile(tmp_path) -> Path:
    return sim_config(tmp_path)


def test_missing_source(tmp_path, capsys):
    refused([tmp_path / "nope.yaml"], capsys, "no such file or folder")


def test_a_folder_that_is_not_a_run(tmp_path, capsys):
    refused([tmp_path], capsys, "not a run folder")


def test_a_run_with_nothing_scored(tmp_path, capsys):
    # construction only: episodes, but none scored on a test task
    eps = [episode("empty", "execute", "a", "retail", "t0", True)]
    run = write_run(tmp_path / "empty", config("empty", ["edv"]), episodes=eps)
    refused([run], capsys, "method_results is empty")


def test_a_config_that_is_not_simulated(tmp_path, capsys):
    cfg = config("real", ["no_memory", "router"])
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(cfg))
    refused([path], capsys, "engine: simulated", "agent 'a'")


def test_an_invalid_config(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("run_id: x\nmodels: 3\n")
    refused([path], capsys, "bad.yaml")


def test_an_agent_missing_from_the_profile(tmp_path, capsys):
    path = sim_config(tmp_path)
    cfg = yaml.safe_load(path.read_text())
    del cfg["models"]["sim"]["simulation"]["agents"]["c"]
    path.write_text(yaml.safe_dump(cfg))
    refused([path], capsys, "'c'", "no entry in the simulation profile")


@pytest.mark.parametrize("flags,needle", [
    (["--task-icc", "1.2"], "task ICC 1.2"),
    (["--task-icc", "-0.1"], "task ICC -0.1"),
    (["--task-icc", "0.6", "--agent-icc", "0.5"], "sum below 1"),
    (["--reps", "10"], "--reps 10"),
    (["--tasks", "0"], "--tasks 0"),
    (["--max-tasks", "0"], "--max-tasks 0"),
    (["--trials", "0"], "--trials 0"),
    (["--power", "1.5"], "--power 1.5"),
    (["--alpha", "0"], "--alpha 0"),
    (["--test", "bayes"], "--test bayes"),
    (["--test", "exact", "--tasks", "3000"], "too many for the exact test"),
    (["--trials-grid", "a,b"], "--trials-grid 'a,b'"),
    (["--trials-grid", "0,2"], "trials must be >= 1"),
    (["--compare", "edv:nope"], "no method 'nope'"),
    (["--compare", "edv"], "use A:B"),
    (["--compare", "edv:edv"], "use A:B"),
    (["--tasks", "1", "--compare", "edv:router"], None),  # one domain: one task is allowed
])
def test_bad_flags(profile, capsys, flags, needle):
    if needle is None:
        assert main(["power", str(profile), *flags, "--reps", "100", "--trials-grid", "1",
                     "--no-progress"]) == 0
        return
    refused([profile, *flags], capsys, needle)


def test_fewer_tasks_than_domains(tmp_path, capsys):
    cfg = config("multi", ["no_memory", "router"], domains=("retail", "airline"))
    eps = [episode("multi", "eval", "a", d, "t0", True) for d in ("retail", "airline")]
    eps += [episode("multi", "route", "a", d, "t0", False) for d in ("retail", "airline")]
    run = write_run(tmp_path / "multi", cfg, episodes=eps,
                    test_tasks=[("retail", "t0"), ("airline", "t0")])
    refused([run, "--tasks", "1"], capsys, "--tasks 1", "one task per domain")
