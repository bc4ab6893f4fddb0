"""runtime.heap: what a worker's warm-up leaves alive is out of later full GC passes, and
what it allocates afterwards is still collected. Each check runs in a fresh interpreter:
freezing is process-wide and must not touch the test session's own heap."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          check=False, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_settle_moves_survivors_out_of_the_full_pass_and_still_collects_new_cycles():
    out = _run("""
        import gc, weakref
        from edv_ray.runtime import heap

        class Node:
            pass

        kept = [Node() for _ in range(1000)]
        gc.collect()
        before = any(o is kept for o in gc.get_objects(generation=2))
        frozen = heap.settle()
        after = any(o is kept for o in gc.get_objects(generation=2))

        a, b = Node(), Node()
        a.other, b.other = b, a          # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        print(before, after, frozen >= 1000, gone() is None)
    """)
    assert out == "True False True True"


def test_warming_up_pauses_the_collector_and_settles_only_on_success():
    out = _run("""
        import gc
        from edv_ray.runtime import heap

        with heap.warming_up():
            inside = gc.isenabled()
            made = [object() for _ in range(500)]
        settled = gc.get_freeze_count()
        try:
            with heap.warming_up():
                more = [object() for _ in range(500)]
                raise RuntimeError("warm-up failed")
        except RuntimeError:
            pass
        print(inside, gc.isenabled(), settled >= 500, gc.get_freeze_count() == settled)
    """)
    assert out == "False True True True"
