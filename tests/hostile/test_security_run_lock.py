"""The run lock never follows a link (issue 28 D6): a `.lock` symlinked to another file
had that file truncated by the next resume. The lock is opened with O_NOFOLLOW and a
non-regular file (a FIFO) is refused: one line naming the lock file, the target intact."""

from __future__ import annotations

import os

import pytest

from edv_ray.cli import main
from edv_ray.results.run_lock import RunLock, RunLockedError
from tests.hostile.security_kit import mock_config, one_line, write_yaml

PRECIOUS = "do not truncate me\n"


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    return victim


def test_symlinked_lock_is_refused_and_its_target_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    victim = _victim(tmp_path)
    (run / ".lock").symlink_to(victim)
    with pytest.raises(RunLockedError, match="symbolic link or not a regular file"):
        RunLock(run).acquire()
    assert victim.read_text() == PRECIOUS


def test_dangling_symlink_creates_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunLockedError):
        RunLock(run).acquire()
    assert not (tmp_path / "elsewhere").exists()


def test_fifo_lock_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / ".lock")
    with pytest.raises(RunLockedError, match="not a regular file"):
        RunLock(run).acquire()


def test_resume_through_a_symlinked_lock_is_one_line(server, tmp_path, capsys):
    path = write_yaml(tmp_path / "cfg.yaml", mock_config(server, tmp_path, run_id="r"))
    assert main(["run", "--no-progress", path]) == 0
    run = tmp_path / "runs" / "r"
    victim = _victim(tmp_path)
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(victim)
    capsys.readouterr()
    assert main(["run", "--no-progress", "--resume", str(run)]) == 2
    assert ".lock" in one_line(capsys.readouterr().err)
    assert victim.read_text() == PRECIOUS
