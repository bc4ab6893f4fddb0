"""Group commit: what concurrent threads of one process write, written together.

A worker runs tens of episodes (and stage jobs) in threads. Each used to write its own two
files (its call rows, then its episode row): ~1.7 ms of CPU an episode — building a
35-column Arrow table for one row costs about what it costs for thirty — and the merge
that later reads them back opened two files an episode. Here a thread hands its rows to the
process's :class:`GroupCommit` and *waits until they are on disk*: the first thread of a
batch (its leader) waits for the others — until ``max_items`` rows are in it, until every
piece of work running in the process is waiting in it (nobody else could join: a lone
episode is written at once), or ``max_wait_s`` — and writes them all, one file per table
and stage. So what the driver learns is unchanged: an episode it hears of is on disk, and
a worker lost mid-batch loses only episodes the driver has not heard of (they run again,
like any episode of a lost worker). Calls are still written before the episode rows of the
same batch, so an episode row means its calls are there.

"Work running in the process" is counted by :meth:`GroupCommit.work` (the episode worker
wraps each episode and stage job in it); a process that counts nothing (a test calling
``run_episode`` directly) writes every submission at once, as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

MAX_ITEMS = 64  # submissions per batch: a batch stays a "small" write (parquet_io.SMALL_ROWS)
MAX_WAIT_S = 0.25  # how long a batch's leader waits for others to join


class _Batch:
    __slots__ = ("items", "full", "done", "error")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.full = threading.Event()  # the leader need not wait longer
        self.done = threading.Event()  # written (or failed: ``error``)
        self.error: BaseException | None = None


class GroupCommit:
    """Submissions from this process's threads, written in batches by ``write(items)``;
    :meth:`submit` returns once its item is written and raises what the write raised."""

    def __init__(self, write: Callable[[list[Any]], None], max_items: int = MAX_ITEMS,
                 max_wait_s: float = MAX_WAIT_S) -> None:
        self._write, self.max_items, self.max_wait_s = write, max_items, max_wait_s
        self._lock = threading.Lock()
        self._open: _Batch | None = None
        self._running = 0  # pieces of work in progress (see :meth:`work`)

    @contextmanager
    def work(self) -> Iterator[None]:
        """Count one piece of work (an episode, a stage job) as running while inside: a
        batch does not wait for work that is not running."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._mark_full()

    def _mark_full(self) -> None:  # under the lock
        """Close the open batch when it is full or nothing running could join it (later
        submissions start the next batch) and wake its leader."""
        b = self._open
        if b is not None and (len(b.items) >= self.max_items or len(b.items) >= self._running):
            self._open = None
            b.full.set()

    def submit(self, item: Any) -> None:
        with self._lock:
            b, leader = self._open, self._open is None
            if leader:
                b = self._open = _Batch()
            b.items.append(item)
            self._mark_full()
        if not leader:
            b.done.wait()
        else:
            b.full.wait(self.max_wait_s)
            with self._lock:
                if self._open is b:
                    self._open = None  # waited long enough: later submissions start the next
            try:
                self._write(b.items)
            except BaseException as err:  # noqa: BLE001 - every writer of the batch sees it
                b.error = err
            finally:
                b.done.set()
        if b.error is not None:
            raise b.error
