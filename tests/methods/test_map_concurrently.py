"""`jobkit.map_concurrently`: a stage job's concurrent calls (a verify job's votes) on one
pool per process — results in order, at most `bound` at once, every call ended before an
error is raised, and no thread started per job."""

from __future__ import annotations

import threading
import time

import pytest

from edv_ray.methods.jobkit import map_concurrently


def test_results_in_order_with_at_most_bound_running():
    running, peak, lock = [0], [0], threading.Lock()

    def call(x: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return x * x

    assert map_concurrently(call, list(range(40)), bound=8) == [x * x for x in range(40)]
    assert 2 <= peak[0] <= 8


def test_an_error_is_raised_after_every_call_ended():
    ended = []

    def call(x: int) -> int:
        time.sleep(0.02 if x else 0.0)
        if x == 0:
            raise ValueError("bad vote")
        ended.append(x)
        return x

    with pytest.raises(ValueError, match="bad vote"):
        map_concurrently(call, list(range(6)), bound=3)
    assert sorted(ended) == [1, 2, 3, 4, 5]  # nothing still running behind the caller


def test_jobs_reuse_the_process_threads():
    def pool_threads() -> set[int]:
        return {t.ident for t in threading.enumerate() if t.name.startswith("edv-calls")}

    map_concurrently(lambda x: time.sleep(0.005), list(range(8)), bound=8)
    before = pool_threads()
    for _ in range(30):  # thirty jobs one after another
        map_concurrently(lambda x: time.sleep(0.005), list(range(8)), bound=8)
    assert before and pool_threads() <= before  # no new thread per job
