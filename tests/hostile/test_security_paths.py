"""Paths are data, never SQL: a run whose output folder holds quotes, brackets and
spaces runs, reports, re-reports and resumes (issue 22 item 1, outside `edv compare`);
a folder name DuckDB would read as a column (`key=value`) is refused before any work."""

from __future__ import annotations

import pytest

from edv_ray.cli import main
from tests.hostile.security_kit import episode_rows, mock_config, one_line, write_yaml


@pytest.mark.slow
def test_output_dir_with_quotes_runs_reports_and_resumes(server, tmp_path, capsys):
    out = tmp_path / "it's [a] run; DROP TABLE x; --"
    cfg = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path, output_dir=str(out)))
    assert main(["run", "--no-progress", cfg]) == 0
    run_dir = out / "t"
    assert (run_dir / "report" / "pass_at_1.csv").is_file()
    assert main(["report", str(run_dir)]) == 0
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    assert episode_rows(run_dir) == (2, 2, 0)  # nothing re-run, nothing doubled
    assert "pass_at_1" in capsys.readouterr().out


@pytest.mark.parametrize("folder", ["success=true", "stage=eval"])
def test_key_value_folder_is_refused_before_work(server, tmp_path, capsys, folder):
    out = tmp_path / folder / "runs"
    cfg = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path, output_dir=str(out)))
    assert main(["run", "--no-progress", cfg]) == 2
    assert "'=' in a folder name" in one_line(capsys.readouterr().err)
    assert not out.exists()
