"""One background event loop per process that runs litellm calls with a wall-clock bound.

Why a loop and not a thread per call: httpx timeouts bound each socket *read*, so a server
that trickles a byte a second keeps a synchronous call alive indefinitely, and a blocked
synchronous read cannot be interrupted from another thread (abandoning it would leak the
thread and its socket until the server gives up). On an event loop the call is a task:
``asyncio.wait_for`` cancels it at the bound, cancellation unwinds through litellm and the
OpenAI SDK into httpcore, and httpcore closes a connection whose response was not read to
the end. Nothing is left behind, however many calls time out.

The loop runs in one daemon thread per process (re-created after a fork), shared by every
:class:`~edv_ray.llm.client.LLMClient` and every episode thread. Calls to OpenAI-compatible
endpoints go through one ``AsyncOpenAI`` per (api_base, key) built once on the pooled
transport, so litellm does not build a new cached client (and pool) for every distinct
timeout value, and no per-call client pays the SDK's first-request setup (a thread hop to
read the platform). The key lives only in this process's memory (as it does in the
environment it came from); the cache is indexed by a hash of it.

Transport cost matters at scale: one event loop serves every call of a worker (64–256 in
flight), so per-call CPU on this loop is the harness's ceiling. The pool is
``httpx2.AsyncClient`` (the OpenAI SDK's own transport): httpx 0.28's pool re-scans every
connection — ``is_idle`` of all of them, for each one — whenever a request starts or ends,
which at 64 connections took a third of a worker's CPU (measured with py-spy, see
``experiments/bench/scale.py``); httpcore2 keeps that pass linear, and the pool is split
into ``POOL_SHARDS`` shards so that the pass (a socket probe per idle connection) covers a
few connections, not all of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import os
import threading
from typing import Any, Awaitable, Callable

import httpcore2
import httpx2
import openai

from edv_ray.llm.breaker import WallClockTimeout

# slack for the calling thread beyond the in-loop bound (the loop may be busy a moment)
_GRACE_S = 2.0
# litellm hands some sync work (logging callbacks) to the loop's default executor: a fixed
# small pool, so threads stay bounded however many calls run or are abandoned
EXECUTOR_THREADS = 4
EXECUTOR_PREFIX = "edv-llm-exec"
# the pool is split in shards, calls spread over them in turn: httpcore checks every idle
# connection of a pool (a socket probe each) whenever a request starts or ends, so the cost
# of a call grows with the connections of its pool; at 64 calls in flight on 128 warm
# connections, one pool cost 15 ms of CPU a call, 8 shards 9 ms (experiments/bench/scale.py)
POOL_SHARDS = 16
SHARD_MAX_CONNECTIONS, SHARD_MAX_KEEPALIVE = 256, 64


class _Loop:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.pools: list[httpx2.AsyncClient] = []
        self.clients: dict[tuple[str | None, str, int], openai.AsyncOpenAI] = {}
        self.turn = itertools.count()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                       name="edv-llm-loop")
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
            max_workers=EXECUTOR_THREADS, thread_name_prefix=EXECUTOR_PREFIX))
        self.pools = [httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=SHARD_MAX_CONNECTIONS,
                                 max_keepalive_connections=SHARD_MAX_KEEPALIVE,
                                 keepalive_expiry=30.0),
            timeout=httpx2.Timeout(600.0, connect=30.0),
            follow_redirects=True,
        ) for _ in range(POOL_SHARDS)]
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


def openai_client(api_base: str | None, api_key: str) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` for one endpoint and key on the shared pool (the next shard in
    turn), without SDK retries (ours are in :class:`~edv_ray.llm.client.LLMClient`). Use
    it only from coroutines run by :func:`run_bounded`; one per (endpoint, key, shard) is
    made once and reused."""
    state = _get()
    shard = next(state.turn) % POOL_SHARDS
    key = (api_base, hashlib.sha256(api_key.encode()).hexdigest(), shard)
    client = state.clients.get(key)
    if client is None:
        client = openai.AsyncOpenAI(api_key=api_key, base_url=api_base, max_retries=0,
                                    http_client=state.pools[shard])
        state.clients[key] = client
    return client


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


def open_connections(base_url: str | None = None) -> int:
    """Connections of the shared pool, all shards, whose socket is not closed — to
    ``base_url``'s host and port only when given (for leak checks in tests; the pool drops
    closed ones from its list only at its next request)."""
    state = _state
    if state is None or state.pid != os.getpid():
        return 0
    origin = None
    if base_url is not None:
        url = httpx2.URL(base_url)
        origin = httpcore2.Origin(url.raw_scheme, url.raw_host, url.port or
                                  (443 if url.scheme == "https" else 80))
    pools = [getattr(getattr(h, "_transport", None), "_pool", None) for h in state.pools]
    return sum(1 for p in pools for c in (getattr(p, "connections", []) or [])
               if not c.is_closed() and (origin is None or c.can_handle_request(origin)))
