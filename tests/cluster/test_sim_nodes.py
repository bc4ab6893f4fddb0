"""The simulated pool on a local multi-node Ray cluster (experiments/bench/scale_nodes.py
at a tiny size): a head and two worker nodes, an EDV construction on the simulated
engine. Checked: the run completes with every episode and no error, the engines listen
on their node's address (not loopback, so other nodes reach them), one on each worker
node (spread like the workers, none on the driver's), the episode workers
sit on two distinct nodes, neither the driver's, and every worker node's processes spent
CPU on the run (the per-node measurement finds each process's node)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

BENCH = Path(__file__).resolve().parents[2] / "experiments" / "bench"
TASKS, TEST_TASKS, NODES = 16, 4, 2


def test_an_edv_construction_on_two_worker_nodes(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import scale_nodes
        from scale_simulated import write_release
    finally:
        sys.path.remove(str(BENCH))
    args = scale_nodes.parse_args(["--tasks", str(TASKS), "--test-tasks", str(TEST_TASKS),
                                   "--concurrency", "8", "--tmp", str(tmp_path)])
    data = write_release(tmp_path / "data", TASKS, TEST_TASKS)
    r = scale_nodes.run_nodes(data, NODES, args, log=print)
    print(scale_nodes.markdown([r]))

    assert r["complete"] and r["errors"] == 0, r
    # every executor pair per training task (one epoch, one trial), and each test task once
    assert r["construction"] == TASKS * 2 and r["episodes"] == TASKS * 2 + TEST_TASKS, r
    where = r["layout"]
    assert len(where["engines"]) == NODES  # one replica per worker node asked
    for e in where["engines"]:  # reachable from the other nodes
        assert e["base_url"].startswith("http://") and "127.0.0.1" not in e["base_url"], e
        assert e["node"] != "?", e
    # spread as workers are (runtime.servers.cpu_engine_strategy): one per worker node,
    # none on the driver's — Ray alone put both on one node, or one on the head
    assert sorted(e["node"] for e in where["engines"]) == [f"node{i}" for i in range(1, NODES + 1)]
    assert len(where["workers"]) == NODES and len(set(where["workers"])) == NODES, where
    assert where["driver_node"] == "head" and "head" not in where["workers"], where
    for i in range(1, NODES + 1):  # each worker node's tree was measured, and worked
        assert r["cpu_s"].get(f"node{i}", 0) > 0.1, r["cpu_s"]
    assert r["cpu_s"]["driver"] > 0 and r["cpu_s"].get("head", 0) > 0, r["cpu_s"]
    assert r["cpu_s"].get("other", 0.0) < 0.5, r["cpu_s"]  # every process found its node
    assert all(ms > 0 for ms in r["per_episode"]["worker_nodes"]), r["per_episode"]
