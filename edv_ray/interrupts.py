"""How a run stops early: on a signal, or when its folder cannot be written.

**Signals.** SIGINT (Ctrl-C) and SIGTERM (what Kubernetes, SLURM and ``ray job stop``
send) are handled alike: inside :func:`stop_on_signals` either one raises
:class:`Stopped` (a ``KeyboardInterrupt``) in the main thread, so the run's ``finally``
blocks stop the workers and model servers, let a compaction in progress finish, abort
W&B and release the run folder's lock; the CLI then prints the resume command and exits
with 128 + the signal number (130 for SIGINT, 143 for SIGTERM). Episodes already written
are kept; those in flight run again on ``--resume`` (every file is written atomically,
so none is half there). A second signal while stopping is ignored; SIGKILL still ends
the process at once (and loses nothing either). Ray's core worker installs its own
SIGTERM handler (a stack dump, then abort) when Ray starts, so :func:`reclaim` puts ours
back after ``ray.init``. A signal that arrives while the main thread waits inside Ray
(``ray.get``, ``ray.wait``) reaches Python as a bare ``KeyboardInterrupt()``: Ray's C++
wait runs our handler, swallows its :class:`Stopped` and raises its own; :func:`stopped`
recovers which signal it was from what the handler recorded.

**Storage errors.** A full disk, a quota, a read-only or failing file system:
:func:`storage_error` finds the ``OSError`` behind an exception (also one a Ray worker
raised) so the CLI prints one line and exits with :data:`EXIT_STORAGE`.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_STORAGE = 5
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS,
                            errno.EACCES, errno.EPERM, errno.ESTALE})


class Stopped(KeyboardInterrupt):
    """The run was asked to stop by a signal."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_state: dict = {"installed": False, "stopping": False, "signum": None}


def _handler(signum, frame) -> None:
    if _state["stopping"]:
        return  # already stopping: let the cleanup finish
    _state.update(stopping=True, signum=int(signum))
    raise Stopped(signum)


def stopped(err: KeyboardInterrupt) -> Stopped:
    """The :class:`Stopped` behind ``err``: itself, or — for the bare ``KeyboardInterrupt``
    Ray raises when a signal arrives during ``ray.get`` / ``ray.wait`` — one for the signal
    our handler received in this :func:`stop_on_signals` block (SIGINT when none did: a
    Ctrl-C outside our handlers)."""
    if isinstance(err, Stopped):
        return err
    return Stopped(_state["signum"] or signal.SIGINT)


def reclaim() -> None:
    """Put our handlers back (after ``ray.init``, whose core worker replaced SIGTERM's)."""
    if _state["installed"] and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handler)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Stopped` inside the block (main thread only; the
    previous handlers come back afterwards); :func:`stopped` inside it knows which signal
    came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _state.update(installed=True, stopping=False, signum=None)
    reclaim()
    try:
        yield
    finally:
        _state.update(installed=False, stopping=False, signum=None)
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def storage_error(err: BaseException) -> OSError | None:
    """The storage ``OSError`` behind ``err`` (its causes, or a Ray task's), if any."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and getattr(e, "errno", None) in STORAGE_ERRNOS:
            return e
        stack += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None


def describe_storage_error(e: OSError) -> str:
    where = f" ({e.filename})" if getattr(e, "filename", None) else ""
    return f"{e.strerror or errno.errorcode.get(e.errno, 'I/O error')}{where}"
