"""A construction run killed mid-way (a worker, or the driver) resumes with nothing lost
and nothing twice: episodes, candidates, votes and memory items are counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.memory import MemoryBank
from edv_ray.results.views import connect
from tests.methods.edv.test_edv_construction import (
    DISTINCT,
    distiller_script,
    edv_config,
    verifier_script,
)


def _script(server):
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", distiller_script(lambda t: [
        ("u", "UNANIMOUS: always confirm the task id before updating it."),
        ("p", f"PARTIAL: {DISTINCT[t]}."),
        ("n", "NONE: guess the user id when it is missing.")]))
    server.add_script("verifier", verifier_script)


def _assert_complete(run_dir: Path) -> None:
    con = connect(run_dir)
    q = lambda sql: con.execute(sql).fetchone()  # noqa: E731
    assert q("SELECT count(*), count(DISTINCT episode_id), bool_and(status = 'ok') FROM episodes "
             "WHERE stage = 'execute'") == (6, 6, True)
    assert q("SELECT count(*), count(DISTINCT (episode_id, attempt)) FROM episode_attempts") == q(
        "SELECT count(*), count(*) FROM episode_attempts")
    assert q("SELECT count(*), count(DISTINCT candidate_id) FROM candidates") == (9, 9)
    assert q("SELECT count(*), count(DISTINCT (candidate_id, verifier)) FROM votes") == (24, 24)
    assert q("SELECT count(*) FROM distill_runs") == (3,)
    assert q("SELECT count(*), count(DISTINCT candidate_id) FROM decisions") == (12, 12)
    bank = MemoryBank.load(run_dir / "memory")
    shared = bank.items(bank="shared")
    assert len(shared) == 1 and shared[0].merged_count == 2
    assert len(bank.items(bank="private", owner="good")) == 3 and len(bank) == 4
    assert q("SELECT count(*), bool_and(status = 'ok') FROM episodes WHERE stage = 'infer'") == (2, True)


def _kill_when(predicate, action, timeout=120):
    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                action()
                return
            time.sleep(0.05)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_resume_after_a_killed_worker(server, tmp_path):
    _script(server)
    server.delay_s = 0.3
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(edv_config(server, tmp_path)))

    def kill_worker():  # only this session's workers: children of its own raylet
        import psutil
        import ray

        raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
        for child in psutil.Process(raylet).children(recursive=True):
            if "ray::EpisodeWorker" in " ".join(child.cmdline()):
                os.kill(child.pid, signal.SIGKILL)

    watcher = _kill_when(lambda: len(server.requests) >= 3, kill_worker)
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    watcher.join()
    con = connect(run_dir)
    crashed = con.execute("SELECT count(*) FROM episode_attempts WHERE status = 'error' "
                          "AND error LIKE '%Actor%'").fetchone()[0]
    assert crashed >= 1  # the in-flight episodes became error rows, not silence
    server.delay_s = 0.0
    pipeline.execute(*pipeline.prepare(None, str(run_dir)), console=Console(quiet=True),
                     show_progress=False)
    _assert_complete(run_dir)


@pytest.mark.slow
def test_resume_after_a_killed_driver(server, tmp_path):
    _script(server)
    server.delay_s = 0.2
    cfg = edv_config(server, tmp_path)
    path = tmp_path / "edv.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_dir = Path(cfg["output_dir"]) / cfg["run_id"]
    env = {**os.environ, "WANDB_MODE": "disabled", "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-m", "edv_ray.cli", "run", "--no-progress"]
    proc = subprocess.Popen(cmd + [str(path)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # kill the whole driver (and the Ray it started) once the distill stage has begun
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if list((run_dir / "edv" / "distill_runs").rglob("*.parquet")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run_dir / "edv" / "decisions").exists()  # it really stopped half-way
    server.delay_s = 0.0
    done = subprocess.run(cmd + ["--resume", str(run_dir)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_complete(run_dir)
