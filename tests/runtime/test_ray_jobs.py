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

import pytest
import yaml

from edv_ray.results.views import connect
from edv_ray.serving.process_server import free_port
from edv_ray.testing.helpers import scripted_config


@pytest.fixture
def ray_head():
    bin_dir = Path(sys.executable).parent
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # short: Ray's socket paths are long
    dash = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "WANDB_MODE": "disabled"}
    cmd = [str(bin_dir / "ray"), "start", "--head", "--port", str(free_port()),
           "--node-ip-address", "127.0.0.1", "--include-dashboard", "true",
           "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--num-cpus", "2", "--temp-dir", temp, "--disable-usage-stats",
           # the session's own Ray already holds the default agent ports
           "--dashboard-agent-listen-port", str(free_port()),
           "--dashboard-agent-grpc-port", str(free_port()),
           "--runtime-env-agent-port", str(free_port()),
           "--metrics-export-port", str(free_port())]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=180)
    yield f"http://127.0.0.1:{dash}", env
    subprocess.run(["pkill", "-f", temp], check=False)
    time.sleep(1)
    shutil.rmtree(temp, ignore_errors=True)


def test_submit_a_run_through_ray_jobs(server, tmp_path, ray_head):
    address, env = ray_head
    cfg = scripted_config(server.base_url, tmp_path, run_id="via-jobs",
                          benchmark={"domains": ["retail"], "split": "test", "num_tasks": 2})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "edv_ray.cli", "submit", str(path),
                           "--address", address], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SUCCEEDED" in proc.stdout
    run_dir = Path(cfg["output_dir"]) / "via-jobs"
    rows = connect(run_dir).execute("SELECT status, success FROM episodes").fetchall()
    assert rows == [("ok", True)] * 4


def test_submit_refuses_a_relative_output_dir(tmp_path):
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["output_dir"] = "runs"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "edv_ray.cli", "submit", str(path), "--address",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is relative" in proc.stderr
