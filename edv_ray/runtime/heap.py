"""Keep the garbage collector's full passes short in long-lived worker processes.

A worker imports τ²-bench, litellm, the OpenAI SDK, pydantic models, maybe torch: a few
hundred thousand long-lived objects before its first episode. CPython's full (generation
2) collection walks every one of them each time it runs, with the GIL held: measured in an
``EpisodeWorker`` at 1 s/call × 64 episodes in flight (``experiments/bench/scale.py``,
a ``gc.callbacks`` probe), two full passes of 330–400 ms during an 18 s phase — every
episode of that worker frozen for their length, a call answered after 1 s seen after up
to 1.4 s. :func:`settle` collects once, then moves everything still alive into the
permanent generation (``gc.freeze``), which later passes skip: what is alive after warm-up
(modules, schemas, a domain's database, the embedder) stays alive for the process's life
anyway. Objects created afterwards are collected as before.

The cost: an object alive at a :func:`settle` that later becomes cyclic garbage is never
freed. Call it where little transient state is alive — after a worker's warm-up, before a
stage's episodes or jobs start (``EpisodeWorker.warm`` / ``settle``) — not between
episodes. Settling at each stage also freezes what earlier stages built (banks, lookup
caches): in the simulated construction (``experiments/bench/scale_simulated.py --tasks
6250``) a worker's GC passes took 19.3 s in all (longest 0.84 s) before, 10–11 s with a
settle only after warm-up and episode stages, 5.5 s (longest 0.36 s) with one before every
stage.

A process's imports pay the same walk over and over: every full pass during a worker's
start walks all that was imported so far (eight passes of 20–250 ms, ~1.2 s of a worker's
start, measured with the same probe). :func:`warming_up` runs a start without them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def settle() -> int:
    """Collect, then exempt every surviving object from later full collections. Returns
    how many objects are now frozen (``gc.get_freeze_count``)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextlib.contextmanager
def warming_up() -> Iterator[None]:
    """Run a process's imports and warm-up with the collector paused, then :func:`settle`
    (only if the block succeeded; the collector is back on either way)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
    settle()
