"""The error paths of ``edv report`` and ``edv compare`` (issue 28 D12): the resume hint
they print is a command that works when pasted (the run folder shell-quoted, whatever
its name), and a Parquet file whose columns have the wrong types (``success`` or
``trial`` as text) is one line naming the file — not a DuckDB BinderException traceback;
``--resume`` sets such an episode file aside like a file cut short."""

from __future__ import annotations

import shlex
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from edv_ray.cli import main
from edv_ray.results import integrity
from tests.report.runfolder import simple_run

NAMES = ["my run", "it's; $(touch PWNED) #", 'say "hi" [b]x[/b] && ls']


def _one_line(capsys, argv) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _episode_file(run: Path) -> Path:
    return min((run / "episodes").rglob("*.parquet"))


def _retype(path: Path, column: str, values) -> None:
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    pq.write_table(table.set_column(i, column, pa.array(values(table.num_rows))), path)


def _pasted(line: str) -> list[str]:
    """The command between the backticks, as a shell would split it."""
    return shlex.split(line.split("`")[1])


@pytest.mark.parametrize("name", NAMES, ids=["space", "shell", "quotes_markup"])
def test_report_resume_hint_pastes_back_the_folder(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = simple_run(tmp_path / "runs dir", name, [True] * 4, run_id="hostile")
    victim = _episode_file(run)
    victim.write_bytes(victim.read_bytes()[:40])  # cut short
    line = _one_line(capsys, ["report", run])
    assert _pasted(line) == ["edv", "run", "--resume", str(run)], line
    assert str(victim) in line and "unreadable" in line
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("column, values, says", [
    ("success", lambda n: ["yes"] * n, "column success is string, expected bool"),
    ("trial", lambda n: ["0"] * n, "column trial is string, expected int32"),
], ids=["success_as_text", "trial_as_text"])
def test_mistyped_episode_file_is_named_by_report_and_compare(column, values, says, tmp_path,
                                                             capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = simple_run(tmp_path / "runs", "r 1", [True, False] * 3, run_id="r1")
    other = simple_run(tmp_path / "runs", "r2", [True, False] * 3)
    victim = _episode_file(run)
    _retype(victim, column, values)
    line = _one_line(capsys, ["report", run])
    assert str(victim) in line and says in line, line
    assert _pasted(line) == ["edv", "run", "--resume", str(run)]
    line = _one_line(capsys, ["compare", run, other, "--out", tmp_path / "cmp", "--boot", "50"])
    assert str(victim) in line and says in line, line


def test_mistyped_pool_file_says_restore(tmp_path, capsys):
    run = simple_run(tmp_path / "runs", "r", [True] * 3)
    pool = run / "pool" / "agents.parquet"
    _retype(pool, "is_executor", lambda n: ["true"] * n)
    line = _one_line(capsys, ["report", run])
    assert str(pool) in line and "column is_executor is string, expected bool" in line
    assert "restore" in line


def test_resume_sets_a_mistyped_episode_file_aside(tmp_path):
    run = simple_run(tmp_path / "runs", "r", [True] * 3)
    assert integrity.find_damaged(run) == []  # a folder as edv writes it is not damaged
    victim = _episode_file(run)
    _retype(victim, "success", lambda n: ["1"] * n)
    moved, other = integrity.set_aside(run)
    assert moved == [victim] and other == []
    assert victim.with_name(victim.name + ".damaged").is_file()


def test_a_sound_run_still_reports(tmp_path, capsys):
    run = simple_run(tmp_path / "runs", "my run", [True, False], run_id="r1")
    assert main(["report", str(run)]) == 0
