"""Folder names are text, never Rich markup (issue 28 D5): an ``output_dir`` holding
``[/b]`` used to raise MarkupError once the run folder existed (the run could neither run
nor resume, exit 1), and a ``[a]`` silently vanished from printed paths. The run, its
resume hint and its resume print the path as it is."""

from __future__ import annotations

import shlex

import pytest

from edv_ray.cli import main
from tests.hostile.security_kit import episode_rows, mock_config, write_yaml


def flat(text: str) -> str:
    """The console text with its line wraps undone."""
    return " ".join(text.split())


@pytest.mark.slow
def test_output_dir_with_markup_runs_prints_literally_and_resumes(server, tmp_path, capsys):
    out = tmp_path / "x[/b] y[a] [bold red]z"
    run_dir = out / "t"
    cfg = write_yaml(tmp_path / "cfg.yaml", mock_config(
        server, tmp_path, output_dir=str(out), llm={"timeout_s": 5, "max_retries": 0}))
    server.fail_next("500", 1000)  # every episode errors: the run ends with a resume hint
    assert main(["run", "--no-progress", cfg]) == 4
    printed = flat(capsys.readouterr().out)
    assert f"→ {run_dir}" in printed  # the run's first line
    assert f"`edv run --resume {shlex.quote(str(run_dir))}`" in printed  # the hint, runnable
    server.clear_faults()
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    printed = flat(capsys.readouterr().out)
    assert f"run folder: {run_dir}" in printed
    assert episode_rows(run_dir)[0] == 2
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0  # again: nothing to do
    assert episode_rows(run_dir)[:2] == (2, 4)  # 2 errored attempts + 2 ok, nothing doubled
    assert main(["report", str(run_dir)]) == 0
