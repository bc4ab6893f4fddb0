"""Stage jobs' call files are merged like episodes': an EDV construction on the simulated
pool leaves segments under ``llm_calls/stage=distill`` and ``stage=verify`` instead of one
file per job, and its per-task tables (``edv/<table>/epoch=E``) merged too — also when no single stage reaches the count (two epochs of three jobs each,
merged once six have piled up) — and every call row is there exactly once (the
distillers' recorded attempts are the distill stage's rows). Before, a stage of 10⁴–10⁵ jobs left as many one-row files
for every view over ``llm_calls`` to open (experiments/bench/scale_simulated.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.store import segments
from edv_ray.results.views import connect

EXAMPLE = Path(__file__).resolve().parents[2] / "experiments" / "simulated_example.yaml"


@pytest.mark.slow
def test_stage_job_calls_are_compacted(ray_session, tmp_path, monkeypatch):
    from edv_ray.runtime import batch

    monkeypatch.setattr(batch, "COMPACT_EVERY", 4)
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(output_dir=str(tmp_path / "runs"), method=["edv"],
               runtime={"concurrency": 8, "workers": 1, "episode_timeout_s": 60},
               benchmark={"name": "tau2", "domains": ["mock"], "split": "all",
                          "task_ids": ["create_task_1"], "train_split": "all",
                          "train_task_ids": ["create_task_1", "update_task_1",
                                             "impossible_task_1"]},
               edv={"epochs": 2, "require_contrast": False, "poison_per_task": 0})
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    result = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True),
                              show_progress=False)
    assert result.complete, (result.errors, result.unfinished)
    for stage in ("distill", "verify"):
        folder = run_dir / "llm_calls" / f"stage={stage}"
        loose = [p for p in folder.glob("*.parquet") if p not in segments(folder)]
        assert segments(folder) and len(loose) < 4, (stage, len(loose))
    con = connect(run_dir)
    attempts = con.execute("SELECT sum(attempts), count(*) FROM distill_runs").fetchone()
    assert attempts[1] == 6  # every task distilled in each epoch (no contrast needed)
    assert con.execute("SELECT count(*), count(DISTINCT episode_id) FROM llm_calls "
                       "WHERE stage = 'distill'").fetchone() == (attempts[0], 6)
    # each epoch's per-task files (markers, candidates, votes) merged into one segment
    for table in ("distill_runs", "candidates", "votes", "verify_runs"):
        for epoch in (0, 1):
            folder = run_dir / "edv" / table / f"epoch={epoch}"
            assert [p.name for p in folder.iterdir()] == ["compacted-00001.parquet"], folder
    counts = "SELECT (SELECT count(*) FROM candidates), (SELECT count(*) FROM votes), " \
             "(SELECT count(*) FROM verify_runs), (SELECT count(*) FROM llm_calls)"
    before = con.execute(counts).fetchone()
    assert before[0] > 0 and before[1] > 0 and before[2] == 6
    # resuming the finished run reads its markers from the segments: nothing is redone
    again = pipeline.execute(*pipeline.prepare(None, str(run_dir)), console=Console(quiet=True),
                             show_progress=False)
    assert again.complete
    assert connect(run_dir).execute(counts).fetchone() == before
