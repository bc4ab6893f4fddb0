"""One writer per run folder: an OS-level exclusive lock on ``RUN_DIR/.lock``.

``with RunLock(run_dir): ...`` holds ``fcntl.flock(LOCK_EX)`` on the lock file for the
run's life. The kernel drops the lock when the holder exits, however it exits (crash,
SIGKILL), so a lock file left behind by a dead process never blocks a new run: only a live
holder does. The file records the holder (pid, host, start time) so a second writer gets a
:class:`RunLockedError` that names it. The file is never deleted (deleting a flock'ed file
lets two processes lock two different inodes); on release its contents are cleared.

The descriptor is close-on-exec and not inherited, so processes the holder starts (Ray
workers, model servers) do not keep the lock alive after it exits. On NFS (a shared run
folder) Linux maps ``flock`` to NFS byte-range locks, which also exclude other hosts.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

LOCK_NAME = ".lock"


class RunLockedError(RuntimeError):
    """Another live process holds the run folder's lock."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def read_holder(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What the lock file says about its holder (None: empty, missing or unreadable).
    Only meaningful while the lock is held: the file outlives dead holders."""
    try:
        text = (Path(run_dir) / LOCK_NAME).read_text()
        info = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _describe(info: dict[str, Any] | None) -> str:
    if not info or "pid" not in info:
        return "another process (it has not recorded itself yet)"
    pid, host = info.get("pid"), info.get("host", "?")
    since = info.get("started_at")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
    if host == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
        # the live holder has just taken the lock and not yet overwritten a dead one's record
        return f"another process (the file still names pid {pid}, which is not running)"
    return f"pid {pid} on host {host}{when}"


class RunLock:
    """Exclusive lock on a run folder (context manager; not re-entrant)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:  # never through a link: a .lock pointing elsewhere would get that file truncated
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                         | os.O_NONBLOCK, 0o666)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise RunLockedError(
                    f"lock file {self.path} is a symbolic link or not a regular file; "
                    "remove it (a run folder's .lock is an ordinary file)") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, device or socket
            os.close(fd)
            raise RunLockedError(f"lock file {self.path} is not a regular file; remove it "
                                 "(a run folder's .lock is an ordinary file)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _describe(read_holder(self.run_dir))
            raise RunLockedError(
                f"run folder {self.run_dir} is in use by {holder}; wait for that run to "
                f"finish or stop it (lock file {self.path})") from None
        except BaseException:
            os.close(fd)
            raise
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time()}
        try:  # replace whatever a dead holder left behind
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # closing releases the lock
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no holder any more (cleared while still locked)
        except OSError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # a forgotten lock still goes with its object
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
