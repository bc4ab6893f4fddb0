"""Shared by the security helper's hostile cases: configs on the scripted server, the
one-line error check, and the no-data-lost check (see README.md)."""

from __future__ import annotations

from pathlib import Path

import yaml

from edv_ray.testing.helpers import scripted_config

MOCK_TASKS = ["create_task_1", "update_task_1"]  # τ²-bench mock tasks with a ticket (solo)


def mock_config(server, tmp_path: Path, **over) -> dict:
    """A tiny No-Memory run: one text agent, two τ²-bench mock tasks in solo mode."""
    return scripted_config(server.base_url, tmp_path, agents=[
        {"name": "text", "model": "scripted", "prompt_strategy": "text_tools"}],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
                   "task_ids": MOCK_TASKS}, **over)


def write_yaml(path: Path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def one_line(text: str) -> str:
    """The single non-empty line of an error output (no traceback, no second line)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert "Traceback" not in text and len(lines) == 1, text[-3000:]
    return lines[0]


def episode_rows(run_dir: Path) -> tuple[int, int, int]:
    """(episodes ok, attempt rows, episodes with two ok attempts) from the run's Parquet."""
    from edv_ray.results.views import connect

    con = connect(run_dir)
    ok = con.execute("SELECT count(*) FROM episodes WHERE status = 'ok'").fetchone()[0]
    rows = con.execute("SELECT count(*) FROM episode_attempts").fetchone()[0]
    doubled = con.execute("SELECT count(*) FROM (SELECT stage, episode_id FROM episode_attempts "
                          "WHERE status = 'ok' GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
    return ok, rows, doubled
