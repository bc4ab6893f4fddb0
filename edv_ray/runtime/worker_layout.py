"""Where a batch's workers go and how many threads each runs (Ray's node list), and
whether an error means the worker's process died."""

from __future__ import annotations

import collections


def shares(concurrency: int, workers: int) -> list[int]:
    """Threads per worker: ``concurrency`` split as evenly as it goes (no worker idle)."""
    n = max(1, min(workers, concurrency))
    return [concurrency // n + (i < concurrency % n) for i in range(n)]


def spread_over_nodes(n: int, driver_node: str, taken: list[str] = ()) -> list[str]:
    """Nodes for ``n`` more workers: each goes to the alive node with the fewest workers
    (``taken``: the nodes of the others), the driver's node last (it also holds the driver
    and the run's state). Ray's ``SPREAD`` and soft node affinity are best effort: on a
    local four-node cluster they put two of three workers on one node."""
    import ray

    alive = sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive")) or [driver_node]
    load = collections.Counter(t for t in taken if t in alive)
    out = []
    for _ in range(n):
        node = min(alive, key=lambda x: (load[x], x == driver_node, x))
        load[node] += 1
        out.append(node)
    return out


def worker_lost(err: BaseException) -> bool:
    """The worker's process died (a crash, its node left the cluster), not the episode."""
    import ray

    return isinstance(err, (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError))



def cpu_share(node: str, workers_on_node: int) -> float:
    """The CPUs one worker may use: the node's CPUs shared by the workers on it. Its torch
    threads are this, at least 1 (``EpisodeWorker``): without it every worker's torch takes
    all the node's cores — two workers on 2 cores ran 4 compute threads, and an embedding
    cost ~2× the CPU it costs alone. Its group commit reads it too: what it could have
    had, against which it is CPU-bound or not (``results.cpu_use.CpuUse``)."""
    import ray

    cpus = next((n.get("Resources", {}).get("CPU", 1.0) for n in ray.nodes()
                 if n.get("NodeID") == node), 1.0)
    return float(cpus) / max(1, workers_on_node)
