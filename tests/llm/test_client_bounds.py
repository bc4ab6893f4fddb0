"""LLMClient against a real HTTP test double: wall-clock bounds (trickling servers included),
deadlines, jittered and budgeted retries, the per-endpoint circuit breaker, re-routing.

Timing bounds are generous (a loaded 2-core machine): they separate "bounded" from
"unbounded" (a trickle would otherwise run for a minute), not fine timings.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil
import pydantic
import pytest

from edv_ray.llm import aio
from edv_ray.llm.breaker import backoff_delay
from edv_ray.llm.client import (
    CallContext,
    CallLedger,
    Endpoint,
    EndpointUnavailable,
    EpisodeDeadlineExceeded,
    LLMCallError,
    LLMClient,
    set_api_base_resolver,
)
from edv_ray.testing.scripted_server import ScriptedServer

CTX = CallContext(run_id="r", stage="test", role="tester", agent="a")  # default answer
MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def srv():
    server = ScriptedServer().start()
    yield server
    server.stop()


def endpoint(server: ScriptedServer) -> Endpoint:
    return Endpoint("scripted", "openai/scripted", server.base_url)


def wait_for(cond, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


# ---- wall-clock bounds -------------------------------------------------------------------
def test_a_trickling_answer_is_cut_at_the_timeout(srv):
    srv.fail_next("trickle", 1)  # headers, then one byte a second for a minute
    ledger = CallLedger()
    t0 = time.monotonic()
    with pytest.raises(LLMCallError, match=r"within 3\.0 s \(wall clock\)") as exc:
        LLMClient(timeout_s=3, max_retries=0).complete(endpoint(srv), MSGS, ctx=CTX,
                                                      ledger=ledger)
    elapsed = time.monotonic() - t0
    assert 2.5 <= elapsed <= 7.0, elapsed  # ~3 s; unbounded it would be ~60 s
    assert "failed after 1 attempt(s)" in str(exc.value)
    (rec,) = ledger.records
    assert not rec.ok and rec.attempts == 1 and "WallClockTimeout" in rec.error
    # the client closed the connection: the server stops dripping into it
    assert wait_for(lambda: srv.active_trickles == 0, 15), srv.active_trickles


@pytest.mark.slow
def test_many_abandoned_calls_leak_no_tasks_threads_or_sockets(srv):
    client = LLMClient(timeout_s=1.5, max_retries=0, breaker_threshold=10**6)  # all time out
    me = psutil.Process()
    client.complete(endpoint(srv), MSGS, ctx=CTX)  # warm: the loop thread exists
    assert aio.open_connections(srv.base_url) == 1  # the count sees this server's connection
    used = []
    for _ in range(3):  # the same load three times: nothing may pile up between rounds
        srv.fail_next("trickle", 8)
        with ThreadPoolExecutor(4) as pool:
            errors = list(pool.map(lambda _: _error_of(client, srv), range(8)))
        assert all(isinstance(e, LLMCallError) and "wall clock" in str(e) for e in errors), \
            errors
        assert wait_for(lambda: srv.active_trickles == 0, 20), srv.active_trickles  # closed
        assert wait_for(lambda: aio.open_tasks() == 0, 10), aio.open_tasks()
        # to this server, at most the warm-up's kept-alive connection (a busy loop may
        # close them late; other tests' kept-alive connections to other servers are not ours)
        assert wait_for(lambda: aio.open_connections(srv.base_url) <= 1, 10), \
            aio.open_connections(srv.base_url)
        time.sleep(1.0)
        others = [t.name for t in threading.enumerate()
                  if not t.name.startswith(aio.EXECUTOR_PREFIX)]  # (a fixed-size pool)
        used.append((len(others), me.num_fds()))
    (t1, f1), _, (t3, f3) = used
    assert t3 <= t1 and f3 <= f1 + 2, used
    executor = [t for t in threading.enumerate() if t.name.startswith(aio.EXECUTOR_PREFIX)]
    assert len(executor) <= aio.EXECUTOR_THREADS
    assert client.complete(endpoint(srv), MSGS, ctx=CTX).content  # still works


def _error_of(client, srv):
    try:
        client.complete(endpoint(srv), MSGS, ctx=CTX)
    except Exception as err:  # noqa: BLE001
        return err
    return None


def test_the_episode_deadline_bounds_a_slow_call(srv):
    srv.delay_s = 30.0
    ledger = CallLedger()
    t0 = time.monotonic()
    with pytest.raises(EpisodeDeadlineExceeded):
        LLMClient(timeout_s=60, max_retries=3).complete(
            endpoint(srv), MSGS, ctx=CTX, ledger=ledger, deadline=time.monotonic() + 2)
    assert time.monotonic() - t0 <= 6.0
    assert len(srv.requests) == 1 and ledger.records[0].attempts == 1  # no retry after it


def test_a_spent_deadline_sends_nothing(srv):
    with pytest.raises(EpisodeDeadlineExceeded):
        LLMClient().complete(endpoint(srv), MSGS, ctx=CTX, deadline=time.monotonic() - 1)
    assert srv.requests == []


# ---- retries -----------------------------------------------------------------------------
def test_backoff_is_exponential_with_jitter():
    rng = random.Random(7)
    for retry, step in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (6, 8.0), (9, 8.0)]:
        draws = [backoff_delay(retry, 0.5, 8.0, rng) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in draws), (retry, min(draws), max(draws))
        assert max(draws) - min(draws) > step / 4  # spread: callers do not re-sync
    a, b = LLMClient(seed=1), LLMClient(seed=2)
    assert [a.backoff(1) for _ in range(5)] != [b.backoff(1) for _ in range(5)]


def test_transient_failures_are_retried_after_a_backoff(srv):
    srv.fail_next("500", 2)
    ledger = CallLedger()
    out = LLMClient(timeout_s=10, max_retries=2, backoff_base_s=0.4).complete(
        endpoint(srv), MSGS, ctx=CTX, ledger=ledger)
    assert out.content and ledger.records[0].attempts == 3 and ledger.records[0].ok
    t = [r["_received_at"] for r in srv.requests]
    assert len(t) == 3
    assert t[1] - t[0] >= 0.2 and t[2] - t[1] >= 0.4  # at least half of each step (jitter)


def test_retries_stop_at_the_retry_budget(srv):
    srv.fail_next("500", 100)
    t0 = time.monotonic()
    with pytest.raises(LLMCallError, match="retry budget 1 s spent"):
        LLMClient(timeout_s=10, max_retries=10, backoff_base_s=0.4, retry_budget_s=1.0
                  ).complete(endpoint(srv), MSGS, ctx=CTX)
    assert len(srv.requests) <= 4 and time.monotonic() - t0 < 10


@pytest.mark.parametrize("code,kind", [("401", openai.AuthenticationError),
                                       ("404", openai.NotFoundError)])
def test_client_errors_are_not_retried_and_do_not_trip_the_breaker(srv, code, kind):
    client = LLMClient(timeout_s=10, max_retries=3, breaker_threshold=1)
    srv.fail_next(code, 1)
    with pytest.raises(LLMCallError, match="after 1 attempt") as exc:
        client.complete(endpoint(srv), MSGS, ctx=CTX)
    assert isinstance(exc.value.__cause__, kind)
    assert len(srv.requests) == 1
    assert not client.breakers.get(srv.base_url).is_open


# ---- circuit breaker ---------------------------------------------------------------------
def _call_all(client, srv, n, deadline_s):
    def one(_):
        ledger = CallLedger()
        try:
            client.complete(endpoint(srv), MSGS, ctx=CTX, ledger=ledger,
                            deadline=time.monotonic() + deadline_s)
            return None, ledger.records[0]
        except Exception as err:  # noqa: BLE001
            return err, ledger.records[0]

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def test_without_a_breaker_an_outage_fails_the_calls(srv):
    """The baseline the breaker fixes: retries burn out within the outage."""
    srv.down(6)
    client = LLMClient(timeout_s=5, max_retries=2, backoff_base_s=0.2, breaker_threshold=10**6)
    results = _call_all(client, srv, 4, 60)
    assert all(isinstance(err, LLMCallError) for err, _ in results), results


def test_concurrent_calls_wait_out_an_outage_and_succeed(srv):
    client = LLMClient(timeout_s=5, max_retries=2, backoff_base_s=0.2, breaker_threshold=3,
                       probe_interval_s=0.5)
    srv.down(6)
    t0 = time.monotonic()
    results = _call_all(client, srv, 6, 90)
    assert [err for err, _ in results] == [None] * 6
    assert time.monotonic() - t0 >= 4.0  # they did wait for the server to come back
    assert all(rec.ok for _, rec in results)
    assert sum(rec.attempts for _, rec in results) > 6  # failed attempts before the outage ended
    assert not client.breakers.get(srv.base_url).is_open  # a success closed it


def test_a_lone_call_waits_too_once_the_breaker_opens(srv):
    client = LLMClient(timeout_s=5, max_retries=1, backoff_base_s=0.2, breaker_threshold=2,
                       probe_interval_s=0.5)
    srv.down(4)
    ((err, rec),) = _call_all(client, srv, 1, 60)
    assert err is None and rec.ok and rec.attempts >= 3


def test_an_outage_longer_than_the_deadline_fails_clearly(srv):
    client = LLMClient(timeout_s=5, max_retries=2, breaker_threshold=1, probe_interval_s=0.5)
    srv.down(60)
    t0 = time.monotonic()
    results = _call_all(client, srv, 3, 3)
    assert time.monotonic() - t0 <= 10.0
    for err, rec in results:
        assert isinstance(err, EndpointUnavailable) and isinstance(err, LLMCallError)
        msg = str(err)
        assert "circuit breaker open" in msg and srv.base_url in msg
        assert "episode deadline" in msg
        assert not rec.ok and "circuit breaker open" in rec.error


def test_a_waiting_call_follows_a_live_re_route(srv):
    other = ScriptedServer().start()
    old = srv.base_url
    try:
        srv.down(120)
        client = LLMClient(timeout_s=5, max_retries=0, breaker_threshold=1, probe_interval_s=0.5)
        timer = threading.Timer(1.5, set_api_base_resolver, (old, lambda: other.base_url))
        timer.start()
        ledger = CallLedger()
        out = client.complete(endpoint(srv), MSGS, ctx=CTX, ledger=ledger,
                              deadline=time.monotonic() + 60)
        assert out.content and ledger.records[0].ok
        assert len(other.requests) == 1
        assert Endpoint("m", "openai/m", old).resolve_api_base() == other.base_url
    finally:
        set_api_base_resolver(old, None)
        other.stop()
    assert Endpoint("m", "openai/m", old).resolve_api_base() == old


def test_a_per_call_resolver_picks_the_url(srv):
    other = ScriptedServer().start()
    try:
        LLMClient().complete(endpoint(srv), MSGS, ctx=CTX,
                             api_base_resolver=lambda ep: other.base_url)
        assert len(other.requests) == 1 and srv.requests == []
    finally:
        other.stop()


def test_endpoint_still_serialises_with_pydantic():
    ep = Endpoint("m", "openai/m", "http://127.0.0.1:1/v1", "KEY_ENV")
    adapter = pydantic.TypeAdapter(Endpoint)
    assert adapter.validate_json(adapter.dump_json(ep)) == ep
    with pytest.raises(dataclasses.FrozenInstanceError):
        ep.api_base = "x"  # frozen
