"""`edv submit` through Ray Jobs to a Ray head started on loopback; the run's Parquet lands
in the (shared) output folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from edv_ray.results.views import connect
from edv_ray.serving.process_server import free_port
from edv_ray.testing.helpers import scripted_config


def _own_ray_processes(head: subprocess.Popen, temp: str) -> list[psutil.Process]:
    """The head's process tree, plus any of our processes that name our private temp dir
    (a Ray process re-parented away from the tree). Never anyone else's."""
    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(head.pid)
        procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        pass
    me = os.getuid()
    for p in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            if p.info["uids"].real == me and any(temp in a for a in p.info["cmdline"] or []):
                procs.setdefault(p.pid, p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError):
            continue
    procs.pop(os.getpid(), None)
    return list(procs.values())


def _stop(procs: list[psutil.Process]) -> list[psutil.Process]:
    """SIGTERM, then SIGKILL what is left; returns what survived both."""
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=20)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=10)
    return alive


@pytest.fixture
def ray_head():
    bin_dir = Path(sys.executable).parent
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths are long
    dash = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "WANDB_MODE": "disabled"}
    # --block keeps `ray start` in the foreground as the parent of every Ray process it
    # starts, so teardown can stop exactly this head's processes by pid
    cmd = [str(bin_dir / "ray"), "start", "--head", "--block", "--port", str(free_port()),
           "--node-ip-address", "127.0.0.1", "--include-dashboard", "true",
           "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--num-cpus", "2", "--temp-dir", temp, "--disable-usage-stats",
           # the session's own Ray already holds the default agent ports
           "--dashboard-agent-listen-port", str(free_port()),
           "--dashboard-agent-grpc-port", str(free_port()),
           "--runtime-env-agent-port", str(free_port()),
           "--metrics-export-port", str(free_port())]
    log = open(Path(temp) / "ray-start.log", "w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    address = f"http://127.0.0.1:{dash}"
    try:
        end = time.monotonic() + 180
        while True:
            assert head.poll() is None, (Path(temp) / "ray-start.log").read_text()[-3000:]
            try:
                if httpx.get(f"{address}/api/version", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < end, "the Ray head did not come up in 180 s"
            time.sleep(1)
        yield address, env
    finally:
        procs = _own_ray_processes(head, temp)
        names = set()
        for p in procs:
            try:
                names.add(p.name())
            except psutil.NoSuchProcess:
                pass
        survivors = _stop(procs)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
        assert not survivors, [p.pid for p in survivors]
        assert "gcs_server" in names  # found (and so stopped) the head's GCS, not leaked it


def _submit(address: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edv_ray.cli", "submit", *args,
                           "--address", address], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_submit_a_run_through_ray_jobs(server, tmp_path, ray_head):
    """A run, then `--resume` of its folder (a space in its name) and of a folder whose
    name is shell syntax: the entrypoint runs through a shell, so each value is quoted."""
    address, env = ray_head
    cfg = scripted_config(server.base_url, tmp_path, run_id="via-jobs",
                          benchmark={"domains": ["retail"], "split": "test", "num_tasks": 2})
    cfg["output_dir"] = str(tmp_path / "my runs")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = _submit(address, env, str(path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SUCCEEDED" in proc.stdout
    run_dir = Path(cfg["output_dir"]) / "via-jobs"
    rows = connect(run_dir).execute("SELECT status, success FROM episodes").fetchall()
    assert rows == [("ok", True)] * 4
    pwned = tmp_path / "PWNED"
    proc = _submit(address, env, "--resume", f"/x; touch {pwned} #")
    assert proc.returncode == 1 and "FAILED" in proc.stdout  # no such run folder
    assert not pwned.exists()
    proc = _submit(address, env, "--resume", str(run_dir))
    assert proc.returncode == 0 and "SUCCEEDED" in proc.stdout, proc.stdout[-3000:]
    assert connect(run_dir).execute("SELECT count(*) FROM episode_attempts").fetchone() == (4,)


def test_submit_refuses_a_relative_output_dir(tmp_path):
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["output_dir"] = "runs"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "edv_ray.cli", "submit", str(path), "--address",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is relative" in proc.stderr
