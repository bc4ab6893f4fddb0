"""Hostile inputs to ``edv compare`` (issue 22: items 1, 6 and the compare cases of 11).
Each case runs the CLI in-process and asserts the exit code, ONE line on stderr, and that no
run folder changed; the accepted ones assert the numbers are each run's own."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

from edv_ray.cli import main
from tests.report.runfolder import simple_run

INJECTION = "x' AS run_id, * EXCLUDE (run_id) FROM method_results; COPY (SELECT 42) TO 'f.csv'; SELECT 'y"
HOSTILE_NAMES = [INJECTION, "r*", "r[1]", "q?", 'd"q;--', "[bold red]markup[/]", "a\\b", "é 名 ✓",
                 "tab\there"]


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(args, capsys, *needles) -> str:
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a COPY ... TO 'f.csv' would land here
    root = tmp_path / "runs"
    r1 = simple_run(root, "r1", [True] * 40)
    r2 = simple_run(root, "r2", [True] * 40)
    return tmp_path, r1, r2


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_folder_names_are_data_not_sql_or_globs(runs, capsys, name):
    tmp, r1, _ = runs
    hostile = simple_run(tmp / "runs", name, [False] * 3 + [True] * 37, run_id="hostile")
    before = digest(hostile), digest(r1)
    code, out, err = run_cli([r1, hostile, "--out", tmp / "cmp", "--boot", "200"], capsys)
    assert code == 0, err
    assert not (tmp / "f.csv").exists() and not list(tmp.rglob("f.csv"))
    main_csv = (tmp / "cmp" / "main.csv").read_text()
    # its own 40 episodes (37 solved), not r1's (a glob `r*` would have read r1 too)
    assert "0.925 [0.801, 0.974] n=40, 0 err" in out and "1.000 [0.912, 1.000] n=40, 0 err" in out
    assert main_csv.count("\n") == 3  # header + one row per run
    assert (digest(hostile), digest(r1)) == before


def test_run_folder_under_a_quoted_output_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = simple_run(tmp_path / "it's \"here\"", "r1", [True] * 30 + [False] * 10)
    code, out, err = run_cli([run, "--out", tmp_path / "cmp", "--boot", "100"], capsys)
    assert code == 0, err
    assert "0.750 [0.598, 0.858] n=40, 0 err" in out


def test_the_same_folder_twice_is_refused(runs, capsys):
    _, r1, _ = runs
    refused([r1, r1], capsys, "given twice", "each run may appear once")


def test_a_copy_of_a_run_is_refused(runs, capsys):
    tmp, r1, _ = runs
    copy = tmp / "elsewhere" / "r1-copy"
    shutil.copytree(r1, copy)
    refused([r1, copy], capsys, "the same run twice (a copy)", "run id 'r1'")


def test_two_runs_sharing_a_folder_name_are_labelled_apart(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = simple_run(tmp_path / "a", "r1", [True] * 40, run_id="ra")
    b = simple_run(tmp_path / "b", "r1", [True] * 20 + [False] * 20, run_id="rb")
    code, out, err = run_cli([a, b, "--out", tmp_path / "cmp", "--boot", "100"], capsys)
    assert code == 0, err
    assert "| a/r1 | no_memory | all | 1.000 [0.912, 1.000] n=40, 0 err |" in out
    assert "| b/r1 | no_memory | all | 0.500 [0.352, 0.648] n=40, 0 err |" in out
    assert "n=80" not in out


def test_two_forty_of_forty_runs_are_two_rows_and_pooled_only_when_asked(runs, capsys):
    tmp, r1, r2 = runs
    code, out, _ = run_cli([r1, r2, "--out", tmp / "c1", "--boot", "100"], capsys)
    assert code == 0
    assert "| r1 | no_memory | all | 1.000 [0.912, 1.000] n=40, 0 err |" in out
    assert "| r2 | no_memory | all | 1.000 [0.912, 1.000] n=40, 0 err |" in out
    assert "r1+r2" not in out and "n=80" not in out
    code, out, _ = run_cli([r1, r2, "--out", tmp / "c2", "--pool", "--boot", "100"], capsys)
    assert code == 0
    assert "`r1+r2` = pooled 2 runs: r1, r2" in out
    assert "| r1+r2 | no_memory | all | 1.000 [0.910, 1.000] n=80 (40 tasks), 0 err |" in out


def test_different_task_sets_are_refused_unless_allowed_and_then_stated(runs, capsys):
    tmp, r1, _ = runs
    other = simple_run(tmp / "runs", "r3", [True] * 20, tasks=[f"u{i}" for i in range(20)])
    refused([r1, other], capsys, "different benchmarks or test-task sets", "--allow-mixed-tasks")
    code, out, _ = run_cli([r1, other, "--allow-mixed-tasks", "--out", tmp / "cmp",
                            "--boot", "100"], capsys)
    assert code == 0 and "DIFFERENT benchmarks or test-task sets (--allow-mixed-tasks)" in out


def test_different_benchmarks_are_refused(runs, capsys):
    tmp, r1, _ = runs
    m2w = simple_run(tmp / "runs", "m", [True] * 40, domain="mind2web", benchmark="mind2web")
    refused([r1, m2w], capsys, "tau2, 40 test tasks", "mind2web, 40 test tasks")


def test_failed_validity_checks_refuse_unless_allowed(runs, capsys):
    tmp, r1, _ = runs
    # selected 41 tasks, scored 40: the tasks_scored check fails
    short = simple_run(tmp / "runs", "short", [True] * 40, tasks=[f"t{i}" for i in range(41)])
    refused([short], capsys, "validity check(s) failed", "tasks_scored", "--allow-invalid")
    code, out, _ = run_cli([short, "--allow-invalid", "--out", tmp / "cmp", "--boot", "100"],
                           capsys)
    assert code == 0 and "INVALID: 1 validity check(s) failed and were overridden" in out
    assert "| short | tasks_scored | no_memory | no | 40/41 tasks" in out


@pytest.mark.parametrize("flags,needle", [
    (["--boot", "0"], "--boot 0"),
    (["--boot", "-5"], "--boot -5"),
    (["--baseline", "nope"], "--baseline nope: no such method"),
    (["--epoch", "99"], "--epoch 99: no method has epoch 99"),
    (["--epoch", "abc"], "--epoch 'abc': use last, all or a number"),
])
def test_bad_arguments_are_one_line(runs, capsys, flags, needle):
    tmp, r1, r2 = runs
    before = digest(r1)
    refused([r1, r2, "--out", tmp / "cmp", *flags], capsys, needle)
    assert digest(r1) == before


def test_out_pointing_at_a_file_is_one_line_and_the_file_is_kept(runs, capsys):
    tmp, r1, _ = runs
    target = tmp / "notes.txt"
    target.write_text("keep me")
    refused([r1, "--out", target], capsys, "exists and is not a folder")
    assert target.read_text() == "keep me"


def test_not_a_run_folder_and_a_damaged_axes_file(runs, capsys):
    tmp, r1, _ = runs
    (tmp / "empty\nline").mkdir()
    line = refused([tmp / "empty\nline"], capsys, "neither an edv run folder")
    assert "empty\\nline" in line
    (r1 / "axes.json").write_text("{not json")
    refused([r1], capsys, "cannot read the run")


def test_markup_in_a_folder_name_is_printed_as_text(runs, capsys):
    tmp, _, _ = runs
    odd = simple_run(tmp / "runs", "[red]x[/red]", [True] * 40, run_id="odd")
    line = refused([odd, odd], capsys, "given twice")
    assert "[red]x[/red]" in line


def test_config_yaml_of_a_run_is_read_safely(runs, capsys):
    tmp, r1, _ = runs
    cfg = yaml.safe_load((r1 / "config.yaml").read_text())
    (r1 / "config.yaml").write_text("!!python/object/apply:os.system ['touch pwned']\n")
    code, _, err = run_cli([r1, "--out", tmp / "cmp"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp / "pwned").exists()
    assert cfg["run_id"] == "r1"
