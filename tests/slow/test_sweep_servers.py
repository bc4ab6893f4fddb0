"""A sweep of 4 variants over 2 self-served models starts each model server once
(real llama.cpp servers; slow, CI runs it)."""

from __future__ import annotations

import json

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.results.views import connect

pytestmark = pytest.mark.slow


def test_four_variants_two_models_two_server_starts(tmp_path, ray_session):
    model = {"engine": "llama_cpp", "weights": "smollm2-135m-instruct", "n_ctx": 2048,
             "n_threads": 1}
    agent = {"prompt_strategy": "text_tools", "sampling": {"temperature": 0.0, "max_tokens": 24}}
    base = {"method": "no_memory", "models": {"m1": model, "m2": model},
            "agents": [{"name": "a1", "model": "m1", **agent}],
            "benchmark": {"domains": ["mock"], "split": "all", "task_ids": ["create_task_1"],
                          "solo": "always", "max_steps": 2},
            "runtime": {"concurrency": 2, "episode_timeout_s": 240},
            "llm": {"timeout_s": 120, "max_retries": 1}, "wandb": {"mode": "disabled"}}
    axes = {"pool": {"m1": {"agents": [{"name": "a1", "model": "m1", **agent}]},
                     "m2": {"agents": [{"name": "a2", "model": "m2", **agent}]}},
            "seed": [0, 1]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"sweep_id": "srv", "output_dir": str(tmp_path / "out"),
                                    "base": base, "parallel": 2, "axes": axes}))
    assert main(["sweep", "--no-progress", str(path)]) == 0
    folder = tmp_path / "out" / "srv"
    started = json.loads((folder / "servers.json").read_text())
    assert sorted(s["model_name"] for s in started) == ["m1", "m2"]  # 2 starts, not 4
    assert len(list((folder / "logs").glob("*.log"))) == 2
    urls = {s["base_url"] for s in started}
    for run in sorted((folder / "runs").iterdir()):
        used = {s["base_url"] for s in json.loads((run / "servers.json").read_text())}
        assert used == urls  # every variant was served by the sweep's servers
        assert connect(run).execute("SELECT count(*), bool_and(status = 'ok') "
                                    "FROM episodes").fetchone() == (1, True)
