"""Compaction during a fan-out: per-episode (per-job) files merged into segments as the
run goes (``results.store.compact_stage``), the merging itself off the driver."""

from __future__ import annotations

import functools
from typing import Any, Callable

COMPACT_EVERY = 2000  # finished episodes between compactions of their per-episode files


@functools.cache
def _merge_task():
    import ray

    @ray.remote(num_cpus=0, max_retries=1)
    def merge(fn: Callable, *args: Any) -> Any:
        return fn(*args)

    return merge


def off_driver(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` in a Ray task on the driver's node (another process), waited for —
    a ``merge`` for ``compact_stage`` / ``compact_task_folder``: reading every per-episode
    file into a segment was ~1–2 ms of driver CPU per episode, the largest share of what
    caps how many GPUs one driver feeds; the driver keeps only the listing and the
    rename. The same CPU is spent, in a process of its own (soft affinity: the run folder
    is certainly readable there). Without Ray (tools, tests) it runs here."""
    import ray

    if not ray.is_initialized():
        return fn(*args)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(),
                                          soft=True)
    return ray.get(_merge_task().options(scheduling_strategy=here).remote(fn, *args))


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
                                                self.every, off_driver)
                               for stage in self.stages()]

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
            compact_stage(self.run_dir, stage, self.tables, self.every, off_driver)

