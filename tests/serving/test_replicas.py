"""Sticky rendezvous replica picking: stickiness, balance, weights, failover, restarts."""

from __future__ import annotations

import threading

import pytest

from edv_ray.serving.protocol import ServerInfo
from edv_ray.serving.replicas import NoHealthyReplica, StickyReplicaPicker

REPLICAS = {f"glm/agent/{i}": f"http://10.0.0.{i}:8000/v1" for i in range(4)}
KEYS = [f"airline/{t}/trial{k}" for t in range(1000) for k in range(4)]


def test_same_key_same_replica_across_instances():
    a, b = StickyReplicaPicker(REPLICAS), StickyReplicaPicker(dict(reversed(REPLICAS.items())))
    for key in KEYS[:200]:
        assert a.pick(key) == a.pick(key) == b.pick(key)


def test_distinct_episodes_spread_evenly():
    counts = StickyReplicaPicker(REPLICAS).assignment(KEYS)
    assert set(counts) == set(REPLICAS)
    expected = len(KEYS) / len(REPLICAS)
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts


def test_weights_shift_the_share():
    picker = StickyReplicaPicker(REPLICAS, weights={"glm/agent/0": 3.0})
    counts = picker.assignment(KEYS)
    share = counts["glm/agent/0"] / len(KEYS)
    assert 0.45 < share < 0.55, counts  # 3 / (3 + 1 + 1 + 1)


def test_marking_down_moves_only_that_replicas_keys():
    picker = StickyReplicaPicker(REPLICAS)
    before = {k: picker.pick_id(k) for k in KEYS}
    picker.mark_down("glm/agent/2")
    after = {k: picker.pick_id(k) for k in KEYS}
    for k in KEYS:
        if before[k] == "glm/agent/2":
            assert after[k] == picker.ranking(k)[1]  # second choice takes over
        else:
            assert after[k] == before[k]
    assert "glm/agent/2" not in set(after.values())
    picker.mark_up("glm/agent/2")
    assert {k: picker.pick_id(k) for k in KEYS} == before


def test_adding_a_replica_only_pulls_keys_to_it():
    picker = StickyReplicaPicker(REPLICAS)
    before = {k: picker.pick_id(k) for k in KEYS}
    picker.add("glm/agent/4", "http://10.0.0.4:8000/v1")
    moved = [k for k in KEYS if picker.pick_id(k) != before[k]]
    assert all(picker.pick_id(k) == "glm/agent/4" for k in moved)
    assert 0.15 < len(moved) / len(KEYS) < 0.25  # about 1/5
    picker.remove("glm/agent/4")
    assert {k: picker.pick_id(k) for k in KEYS} == before


def test_restart_on_a_new_url_keeps_assignments():
    picker = StickyReplicaPicker(REPLICAS)
    owned = [k for k in KEYS if picker.pick_id(k) == "glm/agent/1"]
    picker.mark_down("glm/agent/1")
    picker.set_url("glm/agent/1", "http://10.0.0.9:41000/v1")
    assert picker.healthy_ids == sorted(REPLICAS)
    assert {picker.pick(k) for k in owned} == {"http://10.0.0.9:41000/v1"}


def test_all_down_raises():
    picker = StickyReplicaPicker(["http://a/v1", "http://b/v1"])
    assert picker.pick("x") in ("http://a/v1", "http://b/v1")
    for rid in picker.replica_ids:
        picker.mark_down(rid)
    with pytest.raises(NoHealthyReplica):
        picker.pick("x")


def test_from_infos_and_errors():
    infos = [ServerInfo(server_id=f"q/agent/{i}", model_name="q", served_name="q",
                        base_url=f"http://127.0.0.1:{9000 + i}/v1", engine="vllm")
             for i in range(2)]
    picker = StickyReplicaPicker.from_infos(infos)
    assert picker.url("q/agent/1") == "http://127.0.0.1:9001/v1"
    with pytest.raises(KeyError):
        picker.mark_down("nope")
    with pytest.raises(ValueError):
        StickyReplicaPicker({})
    with pytest.raises(ValueError):
        StickyReplicaPicker(REPLICAS, weights={"glm/agent/0": 0})
    picker.remove("q/agent/0")
    with pytest.raises(ValueError, match="last replica"):
        picker.remove("q/agent/1")


def test_concurrent_picks_agree():
    picker = StickyReplicaPicker(REPLICAS)
    expected = {k: picker.pick(k) for k in KEYS[:500]}
    errors: list[str] = []

    def worker() -> None:
        for k in KEYS[:500]:
            if picker.pick(k) != expected[k]:
                errors.append(k)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
