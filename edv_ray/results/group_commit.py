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

Waiting for the disk is not running: ``work(slots)`` takes one of the process's run slots
(the worker's share of the run's in-flight episodes), and an episode hands it back when it
submits its last write (``submit(item, last=True)``) — while the process is not CPU-bound —
so the next queued episode starts while this one's batch gathers. Otherwise the leader's
wait idles the slot: at 1 s a call and 128 in flight, 8 % of the slot-time went between
episodes (``experiments/bench/scale.py``: 0.82 of the LLM-bound ideal, 0.90 handing slots
over). A CPU-bound process keeps the slot until the write is done: there the wait costs
no throughput (the CPU is what is short), and starting more episodes meanwhile cost each
one ~25 % more CPU (``experiments/bench/scale_simulated.py``, epoch 0's execute: 4.1–4.4 ms
an episode keeping slots, 5.1–5.6 handing every one over). CPU-bound: the process used at
least ``BUSY_SHARE`` of the CPU it could have had over the last 2 s or more
(:class:`~edv_ray.results.cpu_use.CpuUse`, which also reads a container's CPU quota; on
2 cores a worker at 1 s a call used 0.15–0.54 of it; one of the simulated construction
used 0.6–0.85 of a core on a node with no idle CPU left — all it could have had).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from edv_ray.results.cpu_use import CpuUse

MAX_ITEMS = 64  # submissions per batch: a batch stays a "small" write (parquet_io.SMALL_ROWS)
MAX_WAIT_S = 0.25  # how long a batch's leader waits for others to join
BUSY_SHARE = 0.75  # of the CPU it could have (CpuUse): a process using this is CPU-bound
_held = threading.local()  # the run slot this thread's work holds (see GroupCommit.work)


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
                 max_wait_s: float = MAX_WAIT_S, cpu: CpuUse | None = None) -> None:
        self._write, self.max_items, self.max_wait_s = write, max_items, max_wait_s
        self._lock = threading.Lock()
        self._open: _Batch | None = None
        self._running = 0  # pieces of work in progress (see :meth:`work`)
        self.cpu = cpu or CpuUse()  # the worker sets ``cpu.available``

    @contextmanager
    def work(self, slots: threading.Semaphore | None = None) -> Iterator[None]:
        """Count one piece of work (an episode, a stage job) as running while inside: a
        batch does not wait for work that is not running. ``slots``: a run slot is taken
        first (waiting for one) and given back at the work's last write
        (``submit(..., last=True)``) or, at the latest, when it ends."""
        if slots is not None:
            slots.acquire()
        _held.slot = slots
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            self._give_back_slot()
            with self._lock:
                self._running -= 1
                self._mark_full()

    @staticmethod
    def _give_back_slot() -> None:
        slot, _held.slot = getattr(_held, "slot", None), None
        if slot is not None:
            slot.release()

    def cpu_bound(self) -> bool:
        """Whether this process used at least ``BUSY_SHARE`` of the CPU it could have over
        the last window (:class:`CpuUse`; so while that is not known yet)."""
        with self._lock:
            share = self.cpu.update()
        return share is None or share >= BUSY_SHARE

    def _mark_full(self) -> None:  # under the lock
        """Close the open batch when it is full or nothing running could join it (later
        submissions start the next batch) and wake its leader."""
        b = self._open
        if b is not None and (len(b.items) >= self.max_items or len(b.items) >= self._running):
            self._open = None
            b.full.set()

    def submit(self, item: Any, last: bool = False) -> None:
        """``last``: the work's last write — unless the process is CPU-bound, its run slot
        is free for the next while this waits for the disk (the work must then do nothing
        that needs one)."""
        with self._lock:
            b, leader = self._open, self._open is None
            if leader:
                b = self._open = _Batch()
            b.items.append(item)
            self._mark_full()
        if last and getattr(_held, "slot", None) is not None and not self.cpu_bound():
            self._give_back_slot()
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
