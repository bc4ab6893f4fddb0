"""The run-folder lock: one writer at a time, across threads and processes; dead holders
never block."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edv_ray.results.run_lock import RunLock, RunLockedError, read_holder

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_lock_records_the_holder_and_clears_on_release(tmp_path):
    run_dir = tmp_path / "run"
    with RunLock(run_dir) as lock:
        assert lock.held
        info = read_holder(run_dir)
        assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
        assert info["started_at"] > 0
    assert not lock.held
    assert read_holder(run_dir) is None  # released: no holder recorded
    with RunLock(run_dir):  # and it can be taken again
        pass


def test_second_writer_in_the_same_process_is_refused(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunLockedError) as exc:
            RunLock(tmp_path).acquire()
    msg = str(exc.value)
    assert f"pid {os.getpid()}" in msg and socket.gethostname() in msg and str(tmp_path) in msg


def test_second_process_is_refused_while_the_first_holds_it(tmp_path):
    code = """
        import sys
        from edv_ray.results.run_lock import RunLock, RunLockedError
        try:
            RunLock(sys.argv[1]).acquire()
        except RunLockedError as err:
            print("LOCKED:", err)
            sys.exit(3)
        print("ACQUIRED")
    """
    with RunLock(tmp_path):
        proc = _python(code, str(tmp_path))
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert f"pid {os.getpid()}" in proc.stdout and str(tmp_path) in proc.stdout
    proc = _python(code, str(tmp_path))  # released: now the other process gets it
    assert proc.returncode == 0 and "ACQUIRED" in proc.stdout, proc.stdout + proc.stderr


def test_a_process_holding_the_lock_blocks_us_until_it_exits(tmp_path):
    code = """
        import sys, time
        from edv_ray.results.run_lock import RunLock
        lock = RunLock(sys.argv[1]).acquire()
        print("HELD", flush=True)
        sys.stdin.readline()
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HELD"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} on host"):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()  # dies without releasing: the kernel drops the lock
        holder.wait(timeout=30)
    info = read_holder(tmp_path)
    assert info is not None and info["pid"] == holder.pid  # the dead holder's record is left
    with RunLock(tmp_path):  # ... and does not block
        assert read_holder(tmp_path)["pid"] == os.getpid()


def test_stale_file_naming_a_dead_pid_is_not_reported_as_the_holder(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    (tmp_path / ".lock").write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "started_at": 1.0}))
    # nobody holds it: a leftover file never blocks
    with RunLock(tmp_path):
        assert read_holder(tmp_path)["pid"] == os.getpid()
    # a live holder that has not written its record yet: the dead pid is not blamed
    import fcntl

    fd = os.open(tmp_path / ".lock", os.O_RDWR)
    try:
        (tmp_path / ".lock").write_text(json.dumps(
            {"pid": dead.pid, "host": socket.gethostname(), "started_at": 1.0}))
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(RunLockedError) as exc:
            RunLock(tmp_path).acquire()
        assert "not running" in str(exc.value) and f"pid {dead.pid} on host" not in str(exc.value)
    finally:
        os.close(fd)


def test_the_lock_is_not_inherited_by_child_processes(tmp_path):
    """A holder that dies leaves its children running (Ray, model servers): they must
    not keep the lock alive."""
    code = """
        import os, subprocess, sys
        from edv_ray.results.run_lock import RunLock
        RunLock(sys.argv[1]).acquire()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 close_fds=False, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(child.pid, flush=True)
        os._exit(0)  # no release
    """
    proc = _python(code, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    child = int(proc.stdout.split()[0])
    try:
        os.kill(child, 0)  # the child is still alive ...
        with RunLock(tmp_path):  # ... yet the lock died with its holder
            pass
    finally:
        os.kill(child, 9)
