"""Server 500s, hangs and garbage end as error rows (not agent failures); a resume
retries them as a new attempt and keeps the error rows."""

from __future__ import annotations

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["500", "timeout", "garbage"])
def test_fault_becomes_error_row_then_resume_completes(server, tmp_path, fault):
    server.hang_s = 4.0
    cfg = load_config_dict(scripted_config(
        server.base_url, tmp_path,
        agents=[{"name": "text", "model": "scripted", "prompt_strategy": "text_tools"}],
        benchmark={"domains": ["retail"], "split": "test", "num_tasks": 2},
        runtime={"concurrency": 1, "episode_timeout_s": 60},
        llm={"timeout_s": 2, "max_retries": 1}))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    server.fail_next(fault, 1000)  # every call of the first pass fails
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    con = connect(run_dir)
    rows = con.execute("SELECT status, reward, success, error, attempt FROM episodes").fetchall()
    assert len(rows) == 2
    for status, reward, success, error, attempt in rows:
        assert status == "error" and reward is None and success is None and attempt == 1
        assert "LLMCallError" in error and "2 attempt(s)" in error
    failed = con.execute("SELECT count(*), bool_and(NOT ok), max(attempts) FROM llm_calls").fetchone()
    assert failed == (2, True, 2)  # one recorded failed call per episode, each tried twice

    server.clear_faults()
    cfg2, run_id2, run_dir2 = pipeline.prepare(None, str(run_dir))
    assert run_dir2 == run_dir and run_id2 == run_id
    pipeline.execute(cfg2, run_id2, run_dir2, console=Console(quiet=True), show_progress=False)
    con = connect(run_dir)
    latest = con.execute("SELECT status, success, attempt FROM episodes").fetchall()
    assert sorted(latest) == [("ok", True, 2), ("ok", True, 2)]
    history = con.execute("SELECT attempt, status FROM episode_attempts ORDER BY attempt").fetchall()
    assert history == [(1, "error"), (1, "error"), (2, "ok"), (2, "ok")]


@pytest.mark.slow
def test_resume_skips_finished_episodes(server, tmp_path):
    cfg = load_config_dict(scripted_config(server.base_url, tmp_path, benchmark={
        "domains": ["retail"], "split": "test", "num_tasks": 2}))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    before = len(server.requests)
    pipeline.execute(*pipeline.prepare(None, str(run_dir)), console=Console(quiet=True),
                     show_progress=False)
    assert len(server.requests) == before  # nothing re-ran
    n = connect(run_dir).execute("SELECT count(*) FROM episode_attempts").fetchone()[0]
    assert n == 4
