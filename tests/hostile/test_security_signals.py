"""Signals and a full disk during `edv run` (issue 22 items 9 and 11), across a real
process boundary: `python -m edv_ray.cli run` on the scripted server is signalled
mid-run (SIGINT = Ctrl-C; SIGTERM = Kubernetes, SLURM, `ray job stop`) or loses its disk;
it exits with the documented code, one message naming the REAL resume command, the lock
released; `--resume` then finishes with no episode lost or doubled."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edv_ray.cli import main
from edv_ray.results.run_lock import RunLock, read_holder
from edv_ray.testing.helpers import tau2_tasks
from edv_ray.testing.scripted_server import ScriptedServer
from tests.hostile.security_kit import episode_rows, mock_config, write_yaml

TASKS = ["create_task_1", "update_task_1", "impossible_task_1"]
TRIALS = 4
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def slow_server():
    """Its own scripted server (no Ray in this process needed): 0.3 s per answer, so a
    run lasts long enough to be signalled in the middle."""
    server = ScriptedServer({("mock", t.id): t for t in tau2_tasks("mock")}).start()
    server.delay_s = 0.3
    yield server
    server.stop()


def _config(server, tmp_path: Path, output_dir: Path) -> str:
    cfg = mock_config(server, tmp_path, output_dir=str(output_dir),
                      runtime={"concurrency": 2, "workers": 1, "trials": TRIALS,
                               "episode_timeout_s": 60})
    cfg["benchmark"]["task_ids"] = TASKS
    return write_yaml(tmp_path / "cfg.yaml", cfg)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled",
            "RAY_AUTH_MODE": "disabled", "LOGURU_LEVEL": "WARNING"}


def _episode_files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes()
            for p in (run_dir / "episodes").rglob("*.parquet")} if run_dir.is_dir() else {}


def _wait_for_episodes(proc, run_dir: Path, n: int, limit_s: float = 240) -> None:
    t0 = time.monotonic()
    while len(_episode_files(run_dir)) < n:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() - t0 < limit_s, "the run wrote no episodes in time"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_mid_run_then_resume_loses_and_doubles_nothing(slow_server, tmp_path, sig, code):
    out = tmp_path / "my runs"  # a space: the printed command must be quoted
    cfg = _config(slow_server, tmp_path, out)
    run_dir = out / "t"
    proc = subprocess.Popen([sys.executable, "-m", "edv_ray.cli", "run", "--no-progress", cfg],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(), cwd=tmp_path)
    _wait_for_episodes(proc, run_dir, 3)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == code, output[-3000:]
    assert "Traceback" not in output and "received at time" not in output, output[-3000:]
    stopped = [ln for ln in output.splitlines() if ln.startswith("stopped by")]
    assert stopped == [f"stopped by {sig.name}: finished episodes are kept; continue with "
                       f"`edv run --resume '{run_dir}'`"], output[-3000:]
    assert read_holder(run_dir) is None  # released by the process (cleared), not just dead
    RunLock(run_dir).acquire().release()
    before = _attempts(run_dir)
    assert 3 <= len(before) < len(TASKS) * TRIALS  # stopped in the middle
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    assert before <= _attempts(run_dir)  # every episode written before is kept, not re-run
    assert episode_rows(run_dir) == (len(TASKS) * TRIALS, len(TASKS) * TRIALS, 0)


def test_a_signal_during_ray_get_keeps_its_name_and_exit_code(ray_session):
    """Ray's wait runs our handler in C++, swallows its Stopped and raises a bare
    KeyboardInterrupt() instead (CI saw `interrupted ()`, exit 130 for a SIGTERM): the run
    must still stop as SIGTERM, 143, with its resume line."""
    from edv_ray.interrupts import stop_on_signals, stopped

    @ray_session.remote(num_cpus=0)
    def wait_long() -> None:
        time.sleep(60)

    ref = wait_long.remote()
    with stop_on_signals():
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(KeyboardInterrupt) as caught:
            ray_session.get(ref, timeout=30)
        stop = stopped(caught.value)
    ray_session.cancel(ref, force=True)
    assert (stop.name, stop.exit_code) == ("SIGTERM", 143)


def _attempts(run_dir: Path) -> set[tuple]:
    from edv_ray.results.views import connect

    return set(connect(run_dir).execute("SELECT stage, episode_id, attempt, status, success "
                                        "FROM episode_attempts").fetchall())


def _can_mount_tmpfs() -> bool:
    try:
        return shutil.which("unshare") is not None and subprocess.run(
            ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null "
             "|| mount -t tmpfs -o size=64k tmpfs \"$HOME\""], capture_output=True,
            timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


DISK_FULL = r"""
set -u
mount -t tmpfs -o size=4m tmpfs "$DISK"
"$PY" -m edv_ray.cli run --no-progress "$CFG" > "$OUT/first.log" 2>&1 &
pid=$!
while [ "$(find "$DISK" -path '*episodes*' -name '*.parquet' | wc -l)" -lt 3 ]; do
  kill -0 $pid 2>/dev/null || break; sleep 0.2; done
find "$DISK" -path '*episodes*' -name '*.parquet' | sort > "$OUT/before.txt"
dd if=/dev/zero of="$DISK/filler" bs=64k 2>/dev/null   # the disk is full from here on
wait $pid; echo $? > "$OUT/first.rc"
rm -f "$DISK/filler"                                  # space again
"$PY" -m edv_ray.cli run --no-progress --resume "$DISK/t" > "$OUT/resume.log" 2>&1
echo $? > "$OUT/resume.rc"
cp -a "$DISK/t" "$OUT/run"
"""


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unprivileged user+mount namespaces "
                    "(unshare -Urm) to make a small file system that really fills up")
@pytest.mark.slow
def test_disk_full_mid_run_is_one_line_then_resume_completes(slow_server, tmp_path):
    """A real ENOSPC: the run folder is a 4 MB tmpfs (in a private mount namespace) that
    a filler file fills after the first episodes."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    cfg = _config(slow_server, tmp_path, disk)
    proc = subprocess.run(["unshare", "-Urm", "bash", "-c", DISK_FULL], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path,
                          env={**_env(), "DISK": str(disk), "CFG": cfg, "OUT": str(out),
                               "PY": sys.executable})
    first = (out / "first.log").read_text()
    assert (out / "first.rc").read_text().strip() == "5", first[-3000:] + proc.stderr[-2000:]
    lines = [ln for ln in first.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in first, first[-3000:]
    assert "No space left on device" in lines[0]
    assert f"`edv run --resume {disk / 't'}`" in lines[0]
    assert (out / "resume.rc").read_text().strip() == "0", (out / "resume.log").read_text()[-3000:]
    written = (out / "before.txt").read_text().split()
    run = out / "run"
    assert len(written) >= 3 and len(_attempts(run)) == len(TASKS) * TRIALS  # first attempts
    assert episode_rows(run) == (len(TASKS) * TRIALS, len(TASKS) * TRIALS, 0)
