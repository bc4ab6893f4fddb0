"""The driver's book of refs in flight (``runtime.inflight.InFlight``): a queued episode's
timeout starts only when one of its worker's threads frees up, a result for a still-queued
episode frees no thread, and overdue episodes are found whatever their timeouts' order."""

from __future__ import annotations

from types import SimpleNamespace

from edv_ray.runtime.inflight import InFlight


def _item(timeout_s: float) -> SimpleNamespace:
    return SimpleNamespace(timeout_s=timeout_s)


def test_queued_episode_gets_its_full_timeout_from_when_a_thread_frees():
    book = InFlight([1], grace_s=10.0, min_timeout_s=50.0)
    a, b = _item(50.0), _item(50.0)
    book.add("a", a, 0, now=0.0)
    book.add("b", b, 0, now=0.0)  # behind a's thread
    assert book.queued(0) == ["b"]
    assert [r for r, _, _ in book.overdue(61.0)] == ["a"]  # b never counts while queued
    assert book.pop("a", now=100.0) == (a, 0, 0.0)
    assert book.queued(0) == []
    assert book.overdue(160.0) == []  # b started at 100: 60 s is not past 50 + 10
    assert book.overdue(161.0) == [("b", b, 100.0)]


def test_result_of_a_still_queued_episode_frees_no_thread():
    book = InFlight([1, 1], grace_s=0.0, min_timeout_s=5.0)
    for ref in ("a", "b", "c"):
        book.add(ref, _item(5.0), 0, now=0.0)
    book.add("d", _item(5.0), 1, now=0.0)
    assert book.load == [3, 1]
    item, w, started = book.pop("b", now=1.0)  # came back before its turn
    assert (w, started) == (0, None)
    assert book.queued(0) == ["c"]  # still waits: a holds the only thread
    assert book.load == [2, 1]
    assert {r for r, _, _ in book.overdue(6.0)} == {"a", "d"}
    book.pop("a", now=6.0)
    assert book.queued(0) == [] and len(book) == 2
    assert sorted(book.refs()) == ["c", "d"]


def test_overdue_with_mixed_timeouts_reads_past_a_long_one():
    book = InFlight([4], grace_s=0.0, min_timeout_s=5.0)
    book.add("long", _item(100.0), 0, now=0.0)
    book.add("short", _item(5.0), 0, now=10.0)
    book.add("fresh", _item(5.0), 0, now=18.0)
    assert [r for r, _, _ in book.overdue(20.0)] == ["short"]
    assert [r for r, _, _ in book.overdue(101.0)] == ["long", "short", "fresh"]
