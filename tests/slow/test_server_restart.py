"""A llama.cpp engine killed mid-run: Ray restarts its supervised actor on a new port,
the workers follow it (the endpoint is resolved per attempt through the run's RunState)
and the calls wait on the open circuit breaker instead of failing — the run finishes
with 0 error rows (real llama.cpp server; slow, CI runs it)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.views import connect

pytestmark = pytest.mark.slow


def test_killed_server_is_rerouted_live(tmp_path, ray_session):
    cfg = load_config_dict({
        "run_id": "restart", "output_dir": str(tmp_path), "method": "no_memory",
        "models": {"smol": {"engine": "llama_cpp", "weights": "smollm2-135m-instruct",
                            "n_ctx": 2048, "n_threads": 1}},
        "agents": [{"name": "a", "model": "smol", "prompt_strategy": "text_tools",
                    "sampling": {"temperature": 0.0, "max_tokens": 48}}],
        "benchmark": {"domains": ["mock"], "split": "all", "solo": "always", "max_steps": 4,
                      "task_ids": ["create_task_1", "update_task_1", "impossible_task_1"]},
        "runtime": {"concurrency": 2, "workers": 1, "trials": 2, "episode_timeout_s": 400},
        "llm": {"timeout_s": 60, "max_retries": 1, "breaker_threshold": 1},
        "wandb": {"mode": "disabled"}})
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    killed = {}

    def kill_when_busy() -> None:
        servers = run_dir / "servers.json"
        while not (servers.exists() and list((run_dir / "llm_calls").rglob("*.parquet"))):
            time.sleep(0.5)  # the first episode has finished: the run is under way
        info = json.loads(servers.read_text())[0]
        os.kill(info["pid"], signal.SIGKILL)
        killed.update(info, at=time.time())

    threading.Thread(target=kill_when_busy, daemon=True).start()
    result = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True),
                              show_progress=False)
    assert killed, "the server was never killed"
    con = connect(run_dir)
    n, errors = con.execute("SELECT count(*), count(*) FILTER (WHERE status = 'error') "
                            "FROM episode_attempts").fetchone()
    assert (n, errors) == (6, 0) and result.complete
    # calls were answered after the kill: by the restarted server on its new port
    late = con.execute("SELECT count(*) FROM llm_calls WHERE ok AND started_at > ?",
                       [killed["at"]]).fetchone()[0]
    assert late > 0
