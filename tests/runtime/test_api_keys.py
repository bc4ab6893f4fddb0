"""Mixed pools: a key reaches the endpoint from the environment and is written nowhere
(Parquet, logs, config, W&B offline files — and Ray's own session logs, where a
runtime_env's env_vars would land)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.testing.helpers import scripted_config

SECRET = "sk-test-9f8e7d6c5b4a-never-write-me"


@pytest.mark.slow
def test_api_key_is_sent_but_never_stored(server, tmp_path, monkeypatch):
    monkeypatch.setenv("EDV_TEST_KEY", SECRET)
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = scripted_config(server.base_url, tmp_path,
                          benchmark={"domains": ["retail"], "split": "test", "num_tasks": 1})
    cfg["models"]["hosted"] = {"engine": "endpoint", "litellm_model": "openai/hosted",
                               "api_base": server.base_url, "api_key_env": "EDV_TEST_KEY"}
    cfg["agents"][0]["model"] = "hosted"  # one hosted agent, one "self-served" agent
    cfg["wandb"] = {"mode": "offline"}
    cfg["runtime"] = {"concurrency": 4, "workers": 2, "episode_timeout_s": 60}
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    sent = {r["_authorization"] for r in server.requests if r.get("model") == "hosted"}
    assert sent == {f"Bearer {SECRET}"}
    files = [p for p in Path(run_dir).rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any("wandb" in str(p) for p in files)
    leaks = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    assert leaks == []
    import ray

    session = Path(ray._private.worker.global_worker.node.get_session_dir_path())
    logs = [p for p in (session / "logs").rglob("*") if p.is_file()]
    assert logs  # the scan looked at something
    assert [str(p) for p in logs if SECRET.encode() in p.read_bytes()] == []
