"""Compaction during a fan-out: per-episode (per-job) files merged into segments as the
run goes (``results.store.compact_stage``)."""

from __future__ import annotations

from typing import Callable

COMPACT_EVERY = 2000  # finished episodes between compactions of their per-episode files


class Compaction:
    """Every ``every`` results (default ``COMPACT_EVERY``), the per-episode (per-job) files
    of ``stages()`` written so far are merged into a segment in a background thread
    (``results.store.compact_stage``), so a stage never holds more than a few thousand
    small files: DuckDB views (resume, live tracking, reports) stay fast however long the
    run. :meth:`close` waits for the last one; a compaction error is an error of the run
    (nothing was lost)."""

    def __init__(self, run_dir, stages: Callable[[], list[str]],
                 tables: tuple[str, ...] = ("episodes", "llm_calls"),
                 every: int = COMPACT_EVERY) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.run_dir, self.stages, self.tables, self.every = run_dir, stages, tables, every
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edv-compact")
        self.pending: list = []

    def tick(self, done: int) -> None:
        from edv_ray.results.store import compact_stage

        if done % self.every == 0 and all(f.done() for f in self.pending):
            self.pending[:] = [self.pool.submit(compact_stage, self.run_dir, stage, self.tables,
                                                self.every) for stage in self.stages()]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for f in self.pending:
            f.result()

    def settle(self) -> None:
        """After a finished fan-out: merge whatever has piled up to ``every``
        files (earlier calls' leftovers included: many short stages, e.g. one per epoch,
        never reach the count alone)."""
        from edv_ray.results.store import compact_stage

        for stage in self.stages():
            compact_stage(self.run_dir, stage, self.tables, self.every)

