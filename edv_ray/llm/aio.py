"""One background event loop per process that runs litellm calls with a wall-clock bound.

Why a loop and not a thread per call: httpx timeouts bound each socket *read*, so a server
that trickles a byte a second keeps a synchronous call alive indefinitely, and a blocked
synchronous read cannot be interrupted from another thread (abandoning it would leak the
thread and its socket until the server gives up). On an event loop the call is a task:
``asyncio.wait_for`` cancels it at the bound, cancellation unwinds through litellm and the
OpenAI SDK into httpcore, and httpcore closes a connection whose response was not read to
the end. Nothing is left behind, however many calls time out.

The loop runs in one daemon thread per process (re-created after a fork), shared by every
:class:`~edv_ray.llm.client.LLMClient` and every episode thread. Calls go through one
``httpx.AsyncClient`` (a bounded pool with keep-alive) handed to litellm per call via a
light ``AsyncOpenAI`` wrapper, so litellm does not build a new cached client (and pool) for
every distinct timeout value, and API keys are not kept in a client cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any, Awaitable, Callable

import httpx

from edv_ray.llm.breaker import WallClockTimeout

# slack for the calling thread beyond the in-loop bound (the loop may be busy a moment)
_GRACE_S = 2.0
# litellm hands some sync work (logging callbacks) to the loop's default executor: a fixed
# small pool, so threads stay bounded however many calls run or are abandoned
EXECUTOR_THREADS = 4
EXECUTOR_PREFIX = "edv-llm-exec"


class _Loop:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.http: httpx.AsyncClient | None = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                       name="edv-llm-loop")
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
            max_workers=EXECUTOR_THREADS, thread_name_prefix=EXECUTOR_PREFIX))
        self.http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=64,
                                keepalive_expiry=30.0),
            timeout=httpx.Timeout(600.0, connect=30.0),
            follow_redirects=True,
        )
        ready.set()
        self.loop.run_forever()


_state: _Loop | None = None
_state_lock = threading.Lock()


def _get() -> _Loop:
    global _state
    with _state_lock:
        if _state is None or _state.pid != os.getpid() or not _state.thread.is_alive():
            _state = _Loop()
        return _state


def http_client() -> httpx.AsyncClient:
    """The shared pool (use it only from coroutines run by :func:`run_bounded`)."""
    http = _get().http
    assert http is not None
    return http


def run_bounded(make: Callable[[], Awaitable[Any]], bound_s: float) -> Any:
    """Run ``make()`` on the shared loop; abandon it (cancel, close its connection) after
    ``bound_s`` seconds of wall time and raise :class:`WallClockTimeout`."""
    state = _get()

    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(make(), timeout=bound_s)
        except asyncio.TimeoutError:
            raise WallClockTimeout(f"no complete answer within {bound_s:.1f} s "
                                   "(wall clock); the request was abandoned") from None

    fut = asyncio.run_coroutine_threadsafe(bounded(), state.loop)
    with _inflight_lock:
        _inflight.add(fut)
    fut.add_done_callback(_forget)
    try:
        return fut.result(timeout=bound_s + _GRACE_S)
    except WallClockTimeout:
        raise
    except concurrent.futures.TimeoutError:  # (== TimeoutError: keep after the line above)
        raise WallClockTimeout(f"no complete answer within {bound_s:.1f} s (wall clock; "
                               "event loop late); the request was abandoned") from None
    finally:
        if not fut.done():
            fut.cancel()  # the calling thread gave up (timeout or interrupt): stop the task


_inflight: set[concurrent.futures.Future] = set()
_inflight_lock = threading.Lock()


def _forget(fut: concurrent.futures.Future) -> None:
    with _inflight_lock:
        _inflight.discard(fut)


def open_tasks() -> int:
    """Calls still running on the shared loop, abandoned ones included (for leak checks;
    litellm's own logging worker tasks are not counted)."""
    with _inflight_lock:
        return sum(1 for f in _inflight if not f.done())


def open_connections() -> int:
    """Connections held by the shared pool (for leak checks in tests)."""
    state = _state
    if state is None or state.pid != os.getpid() or state.http is None:
        return 0
    pool = getattr(state.http, "_transport", None)
    pool = getattr(pool, "_pool", None)
    return len(getattr(pool, "connections", []) or [])
