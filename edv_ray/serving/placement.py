"""Where GPU server replicas go on a Ray cluster, and the layout that resulted.

One replica is one server actor that reserves all its GPUs (``num_gpus = TP x PP x DP``):
its engine is a child process that sees exactly the actor's GPUs. A model's replicas are
placed as one placement group with one bundle per replica (``{GPU: n, CPU: 1}``), so

- a replica's GPUs are always on one node: a bundle never spans nodes (what STRICT_PACK
  gives a multi-bundle replica; tensor parallelism stays on one node's NVLink);
- the replicas of a model spread over nodes (``SPREAD``): losing one node takes at most
  one replica of a model while there are enough nodes (soft: on fewer nodes they share);
- the whole group is reserved before any engine starts, so a cluster too small for the
  pool fails (or waits for its autoscaler) before hours of weight loading.

Bundles of larger replicas are reserved first (less fragmentation). After a node is lost,
Ray re-places its bundles on surviving nodes when they have room, and the supervised
actor restarts there; otherwise the model goes on with its remaining replicas.

One bundle per GPU (Ray Serve LLM's layout) suits engines that place their own workers
into the bundles; engines larger than a node (``pipeline_parallel_size > 1``) run vLLM's
Ray executor, which builds its own placement group, so they are not reserved here.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable

from edv_ray.config import ConfigError
from edv_ray.serving.protocol import ServerInfo

PLACEMENT_TIMEOUT_S = 1800.0  # an autoscaling cluster may take this long to add GPU nodes


def reserve_replicas(gpus_per_replica: int, replicas: int, strategy: str = "PACK",
                     cpus_per_replica: float = 1, timeout_s: float = 600.0):
    """One placement group with a bundle per replica; returns (group, per-replica
    strategies). Pass each strategy as ``scheduling_strategy`` to the actor, whose
    ``num_gpus``/``num_cpus`` equal the bundle's. TimeoutError when the cluster cannot hold
    the group in ``timeout_s``."""
    groups = reserve({"replicas": (gpus_per_replica, replicas)}, strategy,
                     cpus_per_replica, timeout_s, error=TimeoutError)
    return groups["replicas"]


def reserve(demand: dict[str, tuple[int, int]], strategy: str = "SPREAD",
            cpus_per_replica: float = 1, timeout_s: float = PLACEMENT_TIMEOUT_S,
            error: type[Exception] = ConfigError, echo=None) -> dict:
    """``demand``: model → (GPUs per replica, replicas). One placement group per model,
    all created before waiting for any; returns model → (group, per-replica strategies)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    groups = {}
    for model, (gpus, n) in sorted(demand.items(), key=lambda kv: -kv[1][0]):
        bundle = {"CPU": cpus_per_replica, **({"GPU": gpus} if gpus else {})}
        groups[model] = placement_group([dict(bundle) for _ in range(n)], strategy=strategy,
                                        name=f"edv-{model}-{uuid.uuid4().hex[:8]}")
    pending = {g.ready(): m for m, g in groups.items()}
    deadline, said = time.monotonic() + timeout_s, False
    while pending:
        left = max(0.0, deadline - time.monotonic())
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=min(30.0, left))
        for ref in ready:
            pending.pop(ref)
        if pending and time.monotonic() > deadline:
            for g in groups.values():
                remove_placement_group(g)
            need = sum(g * n for g, n in demand.values())
            raise error(
                f"the cluster lacks the resources for the model servers ({timeout_s:.0f}s): "
                f"{', '.join(f'{m}: {demand[m][1]} x {demand[m][0]} GPU' for m in pending.values())}"
                f" not placed (the run needs {need} GPUs in bundles of one node each; the "
                f"cluster has {ray.cluster_resources().get('GPU', 0):g})")
        if pending and not said and echo is not None:
            echo(f"waiting for GPUs for {', '.join(sorted(pending.values()))} "
                 "(an autoscaling cluster adds nodes now)")
            said = True
    return {m: (g, [PlacementGroupSchedulingStrategy(placement_group=g,
                                                     placement_group_bundle_index=i)
                    for i in range(len(g.bundle_specs))])
            for m, g in groups.items()}


def layout(infos: Iterable[ServerInfo]) -> dict[str, list[ServerInfo]]:
    """node id → the servers on it (``"?"`` for servers outside Ray)."""
    out: dict[str, list[ServerInfo]] = defaultdict(list)
    for info in infos:
        out[info.node_id or "?"].append(info)
    return dict(out)


def layout_lines(infos: Iterable[ServerInfo]) -> list[str]:
    """One line per node: its servers and their GPUs."""
    lines = []
    for node, servers in sorted(layout(infos).items()):
        gpus = sum(len(s.gpu_ids) for s in servers)
        items = ", ".join(f"{s.server_id}" + (f" (GPU {','.join(s.gpu_ids)})" if s.gpu_ids else "")
                          for s in sorted(servers, key=lambda s: s.server_id))
        lines.append(f"node {node[:8]}: {len(servers)} server(s), {gpus} GPU(s): {items}")
    return lines

