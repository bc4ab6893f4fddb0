"""An operator's console: `edv run` writing to a file (not a terminal) shows no notice a user
cannot act on — τ²-bench's import notices, Ray's token-auth default, W&B's Weave hint, the
embedding model's "Loading weights" bar — while real warnings still show. A full EDV +
No-Memory run on the scripted server (W&B offline, Ray's own auth default, the embedding
model loaded for retrieval), one agent failing with a refused key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from edv_ray.envs.protocol import not_a_notice
from edv_ray.testing.helpers import scripted_config
from tests.methods import scripts

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("No .env file found", "Sonnet thinking is disabled",
         "Token authentication is enabled for this Ray cluster", "W&B Weave",
         "Loading weights", "ReadOnly` qualifier")


@pytest.mark.slow  # a full `edv run` in a subprocess: ~1 min alone, 3 min on a loaded VM
def test_the_default_run_output_has_no_noise_and_keeps_real_warnings(server, tmp_path):
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    server.agent_modes["text"] = "nothing"
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("native", "text", "third")]
    cfg = scripted_config(
        server.base_url, tmp_path, method=["no_memory", "edv"], run_id="console",
        agents=agents, roles={"executors": ["native", "text"]},
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
                   "task_ids": ["update_task_with_initialization_actions"],
                   "train_split": "all", "train_task_ids": ["create_task_1"]},
        edv={"n_executors": 2, "require_contrast": False, "retrieval_tau": -1.0},
        wandb={"mode": "offline"})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "WANDB_MODE", "LOGURU_LEVEL")}  # the defaults
    env.update(PYTHONPATH=str(ROOT), WANDB_DIR=str(tmp_path), HOME=str(tmp_path))
    server.fail_next("401", 1)  # the first agent call: a refused key, an errored episode
    out_file = tmp_path / "out.txt"
    with out_file.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "edv_ray.cli", "run", str(path)],
                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                              timeout=900)
    text = out_file.read_text()
    assert proc.returncode == 4, text[-3000:]  # the refused key's episode is an error
    assert (tmp_path / "runs" / "console" / "wandb").is_dir()  # W&B did run (offline)
    for noise in NOISE:
        assert noise not in text, (noise, text[-3000:])
    # real warnings stay: the incomplete run, with what to do about it
    assert "incomplete: 1 episode(s) ended as infrastructure errors" in text
    assert "edv run --resume" in text


@pytest.mark.parametrize("message, shown", [
    ("No .env file found", False), ("Sonnet thinking is disabled", False),
    ("Seats release not implemented for cancellation!!!", True),
    ("Error parsing the response", True)])
def test_only_the_import_notices_are_filtered(message, shown):
    assert not_a_notice({"message": message}) is shown
