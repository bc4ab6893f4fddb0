"""Per-endpoint circuit breakers, failure classification and jittered backoff.

A breaker counts *consecutive* connection-level failures of one ``api_base``:
connection refused / reset / closed without an answer, a wall-clock timeout, and HTTP
502 / 503 / 504 (a proxy or a server that says "not available right now"). After
``threshold`` of them it opens. While it is open a call does not spend its retries: it
waits (bounded by its own deadline) and every ``probe_interval_s`` one waiting call is let
through as a *probe*. A probe that gets any HTTP answer closes the breaker (the server is
back) and wakes every waiter; a probe that fails again keeps it open.

HTTP 500 is deliberately *not* a breaker failure: it is the server answering that this
request broke it (e.g. a chat format it rejects), so waiting would not help; it keeps the
count- and time-bounded retries.

All state is guarded by one condition variable per breaker, so the many episode threads of
a worker process can share one :class:`~edv_ray.llm.client.LLMClient`.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import httpx
import httpx2
import openai

UNAVAILABLE_STATUS = frozenset({502, 503, 504})


class WallClockTimeout(TimeoutError):
    """One attempt ran past its wall-clock bound and was abandoned (its connection closed)."""


def _chain(err: BaseException):
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def is_connection_failure(err: BaseException) -> bool:
    """Did this attempt fail to reach a working server (as opposed to getting an answer)?"""
    for e in _chain(err):
        if isinstance(e, (WallClockTimeout, openai.APIConnectionError, httpx.TransportError,
                          httpx2.TransportError, ConnectionError)):
            return True
        if getattr(e, "status_code", None) in UNAVAILABLE_STATUS:
            return True
        response = getattr(e, "response", None)
        if getattr(response, "status_code", None) in UNAVAILABLE_STATUS:
            return True
    return False


def backoff_delay(retry: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": half the step is fixed, half is random.

    Step ``d = min(cap, base * 2**(retry-1))``; the delay is uniform in ``[d/2, d]``, so
    callers that failed together do not come back together, and each still waits.
    """
    step = min(cap_s, base_s * (2 ** max(0, retry - 1)))
    return step / 2 + rng.uniform(0, step / 2)


class BreakerWaitExpired(Exception):
    """The breaker stayed open until the caller's wait bound."""


@dataclass
class CircuitBreaker:
    api_base: str
    threshold: int = 5
    probe_interval_s: float = 2.0
    failures: int = 0
    opened_at: float | None = None
    last_error: str = ""
    _next_probe: float = 0.0
    _probing: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @property
    def is_open(self) -> bool:
        with self._cond:
            return self.opened_at is not None

    def acquire(self, until: float, slice_s: float | None = None) -> str:
        """Block until a call may go: ``"normal"`` (closed) or ``"probe"`` (this caller
        probes the open breaker). Waits at most until ``until`` (monotonic) and at most
        ``slice_s`` per call (returns ``"again"`` then, so the caller can re-resolve its
        URL); raises :class:`BreakerWaitExpired` at ``until``."""
        end = until if slice_s is None else min(until, time.monotonic() + slice_s)
        with self._cond:
            while True:
                if self.opened_at is None:
                    return "normal"
                now = time.monotonic()
                if not self._probing and now >= self._next_probe:
                    self._probing = True
                    return "probe"
                if now >= until:
                    raise BreakerWaitExpired(self.describe())
                if now >= end:
                    return "again"
                wake = end if self._probing else min(end, self._next_probe)
                self._cond.wait(max(0.01, wake - now))

    def success(self, probe: bool = False) -> None:
        """The endpoint answered (any HTTP answer, errors included)."""
        with self._cond:
            self.failures = 0
            self.opened_at = None
            if probe:
                self._probing = False
            self._cond.notify_all()

    def failure(self, err: str, probe: bool = False) -> bool:
        """A connection-level failure; returns whether the breaker is (now) open."""
        with self._cond:
            self.failures += 1
            self.last_error = err[:300]
            now = time.monotonic()
            if probe:
                self._probing = False
            if self.opened_at is None and self.failures >= self.threshold:
                self.opened_at = now
                self._next_probe = now + self.probe_interval_s
            elif probe:
                self._next_probe = now + self.probe_interval_s
            self._cond.notify_all()
            return self.opened_at is not None

    def release_probe(self) -> None:
        """A probe that ended without telling anything (its caller's deadline hit)."""
        with self._cond:
            self._probing = False
            self._cond.notify_all()

    def describe(self) -> str:
        opened = self.opened_at
        since = f" for {time.monotonic() - opened:.1f} s" if opened is not None else ""
        return (f"endpoint {self.api_base} unavailable: circuit breaker open{since} after "
                f"{self.failures} consecutive connection failure(s) (last: {self.last_error})")


class BreakerRegistry:
    """One breaker per api_base (thread-safe)."""

    def __init__(self, threshold: int, probe_interval_s: float) -> None:
        self.threshold = threshold
        self.probe_interval_s = probe_interval_s
        self._lock = threading.Lock()
        self._by_base: dict[str, CircuitBreaker] = {}

    def get(self, api_base: str | None) -> CircuitBreaker:
        key = api_base or "<default>"
        with self._lock:
            br = self._by_base.get(key)
            if br is None:
                br = CircuitBreaker(key, self.threshold, self.probe_interval_s)
                self._by_base[key] = br
            return br
