"""The simulated pool on a multi-node Ray cluster: the same EDV construction as
``scale_simulated.py`` (its synthetic Mind2Web release, run config and planted profile,
one model call per episode) run through a local cluster of a head node and 1, 2, 4 worker
nodes (Ray's own ``ray.cluster_utils.Cluster``, as ``tests/cluster/test_multinode.py``
builds it), with one episode worker and one simulated-engine replica per worker node.

For each node count it prints where the episode workers and the engines landed (from the
run folder's ``workers.json`` / ``servers.json``), the episodes, wall time, episodes/s over
the run and over the execute stages, and the CPU each part of the cluster spent per
episode: the driver (this process, ``time.process_time`` less the sampler's own thread),
the head node, and each worker node — a node's processes (its raylet, agents, log
monitor; on the head the GCS too) and all their descendants (Ray workers, the engine
processes), sampled with psutil every ``--sample-s`` while the run goes on, so processes
that exit are counted up to their last sample. Over the whole run these include each
node's fixed start-up (raylet, Ray workers importing the framework, engines), so they are
also given over the execute stages alone (first execute episode's start to the last's
end: the steady state). Then a Markdown table, and the figures as JSON (``--out``).

All the nodes of this test bed are processes of one machine: on a 2-core machine they
share the same two cores, so the table measures the overhead of spreading a run over
nodes (more raylets, agents and Ray workers, calls between nodes' addresses), never a
speed-up.

    .venv/bin/python experiments/bench/scale_nodes.py                        # 1, 2, 4 nodes, ~6 min
    .venv/bin/python experiments/bench/scale_nodes.py --nodes 2 --tasks 100  # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import TreeSampler
from scale_simulated import PROFILE, query_times, run_config, write_release

ROOT = Path(__file__).resolve().parents[2]
HEAD_CPUS, NODE_CPUS = 1, 1  # Ray's logical CPUs: workers and engines reserve none
OBJECT_STORE = 128 * 2**20  # per node (Ray's default is 30 % of RAM for each of them)
CAVEAT = ("All nodes are processes of one machine sharing the same {cores} core(s): the "
          "table measures the overhead of spreading a run over nodes, not a speed-up.")


# ---- a local multi-node cluster ------------------------------------------------------------
@contextlib.contextmanager
def cluster_env(temp: str):
    """The environment the nodes inherit (set before they start, restored after): a
    private Ray temp dir, no auth token, no W&B, this repo importable, the venv's tools."""
    keys = ("RAY_TMPDIR", "RAY_AUTH_MODE", "WANDB_MODE", "PYTHONPATH", "PATH", "RAY_ADDRESS")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(RAY_TMPDIR=temp, RAY_AUTH_MODE="disabled", WANDB_MODE="disabled",
                      PYTHONPATH=str(ROOT),
                      PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    os.environ.pop("RAY_ADDRESS", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def node_args(num_cpus: int) -> dict:
    """One node's options: its own free ports (the nodes share one host)."""
    from edv_ray.serving.process_server import free_port

    return {"num_cpus": num_cpus, "object_store_memory": OBJECT_STORE,
            "dashboard_agent_listen_port": free_port(), "metrics_agent_port": free_port(),
            "metrics_export_port": free_port(), "runtime_env_agent_port": free_port()}


@contextlib.contextmanager
def local_cluster(workers: int, log):
    """A head node (no dashboard) and ``workers`` worker nodes; shut down and its temp
    dir removed on the way out, failure or not."""
    from ray.cluster_utils import Cluster

    from edv_ray.serving.process_server import free_port

    temp = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: Ray's socket paths are long
    t0 = time.time()
    with cluster_env(temp):
        c = Cluster(shutdown_at_exit=True)
        try:
            c.add_node(include_dashboard=False, gcs_server_port=free_port(), **node_args(HEAD_CPUS))
            for _ in range(workers):
                c.add_node(**node_args(NODE_CPUS))
            c.wait_for_nodes()
            log(f"cluster: head + {workers} worker node(s) up in {time.time() - t0:.0f} s")
            yield c
        finally:
            c.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


def node_roots(c) -> tuple[dict[int, str], dict[str, str]]:
    """(pid of each node's own process → node label, node id → label): ``head``,
    ``node1``…"""
    pids, labels = {}, {}
    for i, node in enumerate(c.list_all_nodes()):
        label = "head" if node is c.head_node else f"node{i}"
        labels[node.node_id] = label
        for infos in node.all_processes.values():
            for info in infos:
                pids[info.process.pid] = label
    return pids, labels


class NodeSampler(TreeSampler):
    """harness.TreeSampler with processes grouped by node: the label of the first node
    process above it (``other``: none), ``driver`` for this process; ``own``: the CPU
    seconds of the sampling itself (it runs in the driver's process)."""

    def __init__(self, roots: dict[int, str], period_s: float) -> None:
        super().__init__(period_s=period_s)
        self.roots, self.where, self.own = roots, {}, 0.0

    def _group(self, p) -> str:
        if p.pid == self.me.pid:
            return "driver"
        if p.pid not in self.where:  # sticky: a process stays on its node
            label, q = "other", p
            try:
                while q is not None and q.pid != self.me.pid:
                    if q.pid in self.roots:
                        label = self.roots[q.pid]
                        break
                    q = q.parent()
            except self._psutil.Error:
                pass
            self.where[p.pid] = label
        return self.where[p.pid]

    def snapshot(self):
        t = time.thread_time()
        try:
            return super().snapshot()
        finally:
            self.own += time.thread_time() - t


# ---- one cluster size ----------------------------------------------------------------------
def layout(run_dir: Path, labels: dict[str, str]) -> dict:
    """Where the episode workers and the simulated engines ran, by node label."""
    placed = json.loads((run_dir / "workers.json").read_text())
    servers = json.loads((run_dir / "servers.json").read_text())
    name = lambda node: labels.get(node or "", node or "?")
    return {"driver_node": name(placed["driver_node"]),
            "workers": [name(n) for n in placed["workers"]],
            "engines": [{"server": s["server_id"], "node": name(s["node_id"]),
                         "base_url": s["base_url"]} for s in servers]}


def execute_window(run_dir: Path) -> tuple[float, float, int]:
    """(first start, last end, count) of the execute-stage episodes."""
    from edv_ray.results.views import connect

    con = connect(run_dir)
    try:
        return con.execute("SELECT min(started_at), max(started_at + wall_s), count(*) "
                           "FROM episodes WHERE stage = 'execute'").fetchone()
    finally:
        con.close()


def per_episode(cpu: dict[str, float], episodes: int, nodes: int) -> dict:
    """CPU ms per episode of each group, the worker nodes' list, and the total."""
    ms = {g: 1000 * s / max(1, episodes) for g, s in sorted(cpu.items())}
    return {"ms": ms, "worker_nodes": [ms.get(f"node{i}", 0.0) for i in range(1, nodes + 1)],
            "total": sum(ms.values())}


def run_nodes(data: Path, nodes: int, args, log, console=None) -> dict:
    """The construction on a cluster of a head and ``nodes`` worker nodes: its figures."""
    import ray
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict

    out = Path(tempfile.mkdtemp(prefix=f"scale-nodes-n{nodes}-", dir=args.tmp))
    try:
        with local_cluster(nodes, log) as c:
            roots, labels = node_roots(c)
            raw = run_config(data, out, nodes, args)  # workers = nodes: one per node
            raw["run_id"] = f"scale-nodes-n{nodes}"
            raw["runtime"]["ray_address"] = c.address
            raw["models"]["sim"]["replicas"] = nodes
            cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(raw))
            load0 = Path("/proc/loadavg").read_text().split()[:3]
            sampler = NodeSampler(roots, args.sample_s).start()
            t0, c0 = time.time(), time.process_time()
            try:
                result = pipeline.execute(cfg, run_id, run_dir,
                                          console=console or Console(quiet=True),
                                          show_progress=console is not None)
            finally:
                driver_s = time.process_time() - c0
                wall = time.time() - t0
                sampler.stop()
                if ray.is_initialized():
                    ray.shutdown()
            cpu = sampler.cpu_between(t0, time.time())
            cpu["driver"] = driver_s - sampler.own
            load1 = Path("/proc/loadavg").read_text().split()[:3]
        where = layout(run_dir, labels)
        q = query_times(run_dir)
        first, last, n_exec = execute_window(run_dir)
        steady = sampler.cpu_between(first, last)  # the driver here by samples, sampler's own in
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return {"nodes": nodes, "complete": result.complete, "errors": result.errors,
            "episodes": q["episodes"], "construction": q["construction"], "pass1": q["pass1"],
            "wall_s": wall, "episodes_per_s": q["episodes"] / wall,
            "execute_episodes_per_s": q["execute_rate"], "layout": where,
            "cpu_s": cpu, "per_episode": per_episode(cpu, q["episodes"], nodes),
            "execute_s": last - first, "execute_cpu_s": steady,
            "per_execute_episode": per_episode(steady, n_exec, nodes), "load_before": "/".join(load0),
            "load_after": "/".join(load1), "report_s": q["report_s"]}


# ---- the table -----------------------------------------------------------------------------
def markdown(rows: list[dict]) -> str:
    """nodes, episodes, rates, and CPU ms per episode over the run (driver, head, worker
    nodes' mean and max, total) and over the execute stages (worker node mean, total)."""
    head = ("| worker nodes | episodes | wall s | episodes/s | execute episodes/s | CPU ms per "
            "episode: driver | head | per worker node: mean (max) | total | execute stages: "
            "per worker node | total |")
    lines = [head, "|" + "---:|" * head.count(" | ") + "---:|"]
    for r in rows:
        run, ex = r["per_episode"], r["per_execute_episode"]
        w, xw = run["worker_nodes"], ex["worker_nodes"]
        lines.append(f"| {r['nodes']} | {r['episodes']:,} | {r['wall_s']:.0f} | "
                     f"{r['episodes_per_s']:.1f} | {r['execute_episodes_per_s']:.1f} | "
                     f"{run['ms'].get('driver', 0):.1f} | {run['ms'].get('head', 0):.1f} | "
                     f"{sum(w) / len(w):.1f} ({max(w):.1f}) | {run['total']:.1f} | "
                     f"{sum(xw) / len(xw):.1f} | {ex['total']:.1f} |")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,2,4", help="comma list of worker-node counts")
    ap.add_argument("--tasks", type=int, default=1000, help="synthetic training tasks")
    ap.add_argument("--test-tasks", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64, help="episodes in flight")
    ap.add_argument("--sample-s", type=float, default=0.5, help="CPU sampling period")
    ap.add_argument("--tmp", default=None, help="where run folders go (default: the system's)")
    ap.add_argument("--keep", action="store_true", help="keep each run folder")
    ap.add_argument("--quiet", action="store_true", help="no run progress")
    ap.add_argument("--out", default="scale_nodes.json", help="the figures as JSON")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from rich.console import Console

    args = parse_args(argv)
    console = Console(width=160)
    log = lambda line: console.print(line, highlight=False, markup=False)
    data = write_release(Path(tempfile.mkdtemp(prefix="scale-nodes-data-", dir=args.tmp)),
                         args.tasks, args.test_tasks)
    log(f"synthetic Mind2Web: {args.tasks:,} training tasks, {args.test_tasks} test tasks, "
        f"{args.epochs} epoch(s); machine: {os.cpu_count()} core(s)")
    rows = []
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            log(f"== {n} worker node(s): {n} episode worker(s), {n} simulated engine(s)")
            r = run_nodes(data, n, args, log, None if args.quiet else console)
            rows.append(r)
            where = r["layout"]
            log(f"  episode workers on: {', '.join(sorted(where['workers']))} (driver on "
                f"{where['driver_node']}); engines: " + ", ".join(
                    f"{e['server']} on {e['node']} at {e['base_url']}" for e in where["engines"]))
            log(f"  {r['episodes']:,} episodes ({r['construction']:,} construction, "
                f"{r['errors']} errors, complete={r['complete']}) in {r['wall_s']:.0f} s; load "
                f"{r['load_before']} → {r['load_after']}; CPU ms per episode: " + ", ".join(
                    f"{g} {v:.1f}" for g, v in r["per_episode"]["ms"].items()) + "; over the "
                f"execute stages ({r['execute_s']:.0f} s): " + ", ".join(
                    f"{g} {v:.1f}" for g, v in r["per_execute_episode"]["ms"].items()))
    finally:
        shutil.rmtree(data, ignore_errors=True)
        Path(args.out).write_text(json.dumps(
            {"cores": os.cpu_count(), "args": vars(args), "profile": PROFILE, "rows": rows},
            indent=1))
    print(markdown(rows))
    print(CAVEAT.format(cores=os.cpu_count()))
    return 0 if all(r["complete"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
