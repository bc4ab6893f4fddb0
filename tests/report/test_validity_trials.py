"""`tasks_scored` at several trials (issue 29 item 9), over stored run folders read through
the real views: a method that picks one run per (task, trial) — Judge, Router, EDV — is
scored by (task, trial), whichever agent it picked on each trial, so a Judge that picks
different agents on the trials of a task passes; a picking method missing a (task,
trial) fails, and so does a per-agent method missing one agent's trial. (The same on a
real simulated run, with `edv compare`: tests/runtime/test_test_seeds.py.)"""

from __future__ import annotations

from pathlib import Path

from edv_ray.methods.judge import PICK_SCHEMA
from edv_ray.report.validity import run_checks
from edv_ray.results.parquet_io import write_rows_atomic
from tests.report.runfolder import config, episode, write_run

AGENTS = ("a", "b", "c")
TASKS = [f"t{i}" for i in range(4)]
TRIALS = 2


def _run(tmp_path: Path, drop: set[tuple] = frozenset()) -> Path:
    """No-Memory (per agent), Router and EDV (one routed solver per task, epoch 1) and a
    Judge that picks agent (task + trial) mod 3: another agent on each trial. ``drop``:
    (method, task, trial[, agent]) cells left out."""
    eps, picks = [], []
    for i, task in enumerate(TASKS):
        for trial in range(TRIALS):
            for agent in AGENTS:
                if ("no_memory", task, trial, agent) not in drop:
                    eps.append(episode("r", "eval", agent, "retail", task, (i + trial) % 2, trial=trial))
            for stage, method in (("route", "router"), ("infer", "edv")):
                if (method, task, trial) not in drop:
                    eps.append(episode("r", stage, AGENTS[i % 3], "retail", task, trial == 0,
                                       epoch=1, trial=trial))
            picked = AGENTS[(i + trial) % 3]
            if ("judge", task, trial) not in drop:
                picks.append(dict(run_id="r", domain="retail", task_id=task, trial=trial, judge="j",
                                  status="ok", parse_ok=True, attempts=1, picked_agent=picked,
                                  picked_success=True, picked_reward=1.0,
                                  picked_episode_id=f"eval-e0-{picked}-retail-{task}-t{trial}"))
    folder = write_run(tmp_path / "run", config("r", ["no_memory", "judge", "router", "edv"],
                                                 agents=AGENTS, runtime={"trials": TRIALS},
                                                 roles={"executors": list(AGENTS), "judge": "a"}),
                       episodes=eps, test_tasks=[("retail", t) for t in TASKS])
    write_rows_atomic(picks, folder / "judge_picks" / "epoch=0" / "part.parquet", PICK_SCHEMA)
    return folder


def _scored(folder: Path) -> dict:
    return {c.method: c for c in run_checks(folder) if c.name == "tasks_scored"}


def test_judge_picking_other_agents_per_trial_passes(tmp_path):
    checks = _scored(_run(tmp_path))
    assert set(checks) == {"no_memory", "judge", "router", "edv"}
    for method, c in checks.items():
        assert c.ok, (method, c)
        assert c.figure.startswith("4/4 tasks")
    assert checks["judge"].figure == "4/4 tasks, 8 rows (epoch 0)"  # one per (task, trial)
    assert "one picked result per trial" in checks["judge"].detail
    assert "one picked result per trial" in checks["router"].detail
    assert "one result per agent and trial" in checks["no_memory"].detail


def test_picking_method_missing_a_task_trial_fails(tmp_path):
    checks = _scored(_run(tmp_path, drop={("judge", "t1", 1), ("edv", "t3", 1)}))
    for method in ("judge", "edv"):
        assert not checks[method].ok
        assert "1 (task, trial) cell(s) of a scored task without a result" in checks[method].detail
    assert checks["router"].ok and checks["no_memory"].ok


def test_per_agent_method_missing_one_agents_trial_fails(tmp_path):
    checks = _scored(_run(tmp_path, drop={("no_memory", "t2", 1, "b")}))
    assert not checks["no_memory"].ok
    assert "1 (task, agent, trial) cell(s)" in checks["no_memory"].detail
    assert checks["judge"].ok
