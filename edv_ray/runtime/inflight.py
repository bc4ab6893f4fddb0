"""The driver's book of the episodes (or stage jobs) submitted to workers and not yet back.

Each worker runs ``shares[w]`` of them in threads; more wait in its queue until one of
those threads frees up. The book keeps, at a cost that does not grow with what is in
flight:

* which worker each ref is on, and how many each worker holds (``load``);
* which refs wait in a worker's queue, oldest first (their timeout has not started);
* the running refs in the order they started, so the overdue ones are found by reading
  the oldest few, not every ref in flight.
"""

from __future__ import annotations

from typing import Any


class InFlight:
    """Refs in flight: ``add`` on submit, ``pop`` when a result (or a timeout) is in."""

    def __init__(self, shares: list[int], grace_s: float, min_timeout_s: float) -> None:
        """``min_timeout_s``: the shortest ``timeout_s`` of the items this book will hold
        (a running ref younger than it plus ``grace_s`` is not overdue, nor any newer)."""
        self.shares = shares
        self.grace_s = grace_s
        self.min_timeout_s = min_timeout_s
        self.load = [0] * len(shares)  # submitted to each worker and not yet back
        self._items: dict[Any, tuple[Any, int]] = {}  # ref → (item, worker)
        self._queued: list[dict[Any, None]] = [{} for _ in shares]  # oldest first
        self._running: dict[Any, float] = {}  # ref → started at, in start order

    def __len__(self) -> int:
        return len(self._items)

    def refs(self) -> list:
        return list(self._items)

    def queued(self, w: int) -> list:
        """The refs waiting for one of worker ``w``'s threads, oldest first."""
        return list(self._queued[w])

    def add(self, ref, item, w: int, now: float) -> None:
        """``item`` was submitted to worker ``w`` at ``now``: it runs at once if the worker
        has a free thread, else waits in its queue."""
        self._items[ref] = (item, w)
        if self.load[w] >= self.shares[w]:
            self._queued[w][ref] = None
        else:
            self._running[ref] = now
        self.load[w] += 1

    def pop(self, ref, now: float) -> tuple[Any, int, float | None]:
        """``ref`` is back (or given up): ``(item, worker, started at)`` — None if it was
        still queued. The thread it held frees up: the worker's oldest queued ref now
        runs, and its timeout counts from ``now``."""
        item, w = self._items.pop(ref)
        self.load[w] -= 1
        started = self._running.pop(ref, None)
        queue = self._queued[w]
        if started is None:
            del queue[ref]  # it never held a thread
        elif queue:
            nxt = next(iter(queue))
            del queue[nxt]
            self._running[nxt] = now
        return item, w, started

    def overdue(self, now: float) -> list[tuple[Any, Any, float]]:
        """``(ref, item, started at)`` of each running ref past its ``timeout_s`` plus the
        grace; reads the running refs oldest first and stops at the first that is younger
        than the shortest timeout (every later one started later still)."""
        out = []
        for ref, t0 in self._running.items():
            if now - t0 <= self.min_timeout_s + self.grace_s:
                break
            item = self._items[ref][0]
            if now - t0 > item.timeout_s + self.grace_s:
                out.append((ref, item, t0))
        return out
