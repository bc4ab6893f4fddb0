"""The cluster path on one machine: a Ray cluster of four nodes (Ray's own
``cluster_utils.Cluster``, as Ray tests its scheduler), each declaring 8 GPUs as the SLURM
layout's nodes do; the paper pool (cluster/configs/paper-pool.yaml: three models x 2
replicas x TP4, a TP1 user simulator x 2) served through the real vLLM scheduling code —
catalog, placement groups, supervised actors, watchdog — with a CPU stand-in for the vLLM
process (edv_ray/testing/vllm_standin.py). Checked: the layout (each replica's GPUs on
one node, distinct GPUs, replicas of a model on different nodes), the episode workers
spread over nodes, a node removed mid-run (its servers announced lost and either back on
a surviving node or the model going on with its other replica; the episodes its worker
had in flight run again), then a replacement node joins and `edv submit --resume` through
Ray Jobs finishes the run on the cluster: 0 episodes lost, 0 doubled. The engines, which
listen on their nodes' addresses, refuse a request without the run's key (HTTP 401); the
key (read from an engine's environment) is in no file of the run folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml

from edv_ray.results.views import connect
from edv_ray.serving.process_server import free_port
from edv_ray.testing.vllm_standin import launcher

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
PAPER_POOL = ROOT / "cluster" / "configs" / "paper-pool.yaml"
GPUS_PER_NODE = 8
TASKS, TRIALS = 8, 3


def bed_config(tmp_path: Path) -> dict:
    """paper-pool.yaml as it is, on stand-in engines: a small No-Memory run on airline."""
    cfg = yaml.safe_load(PAPER_POOL.read_text())
    engine = str(launcher(tmp_path))
    for model in cfg["models"].values():
        model.update(python=engine, engine_args={"standin_delay_s": 0.4})
    for agent in cfg["agents"]:
        agent["sampling"]["max_tokens"] = 1024
    cfg.update(run_id="bed", output_dir=str(tmp_path / "runs"), method="no_memory",
               wandb={"mode": "disabled"}, llm={"timeout_s": 30, "max_retries": 3})
    cfg["benchmark"] = {"name": "tau2", "domains": ["airline"], "split": "test",
                        "num_tasks": TASKS}
    cfg["runtime"] = {"ray_address": "auto", "concurrency": 9, "workers": 3,
                      "trials": TRIALS, "episode_timeout_s": 180}
    return cfg


def node_args() -> dict:
    return dict(num_gpus=GPUS_PER_NODE, dashboard_agent_listen_port=free_port(),
                metrics_agent_port=free_port(), metrics_export_port=free_port(),
                runtime_env_agent_port=free_port())


@pytest.fixture
def cluster(monkeypatch):
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths are long
    # a private temp dir: other Ray users of this machine never see this cluster
    monkeypatch.setenv("RAY_TMPDIR", temp)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    dash = free_port()
    c = Cluster(shutdown_at_exit=True)
    try:
        c.add_node(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1",
                   dashboard_port=dash, gcs_server_port=free_port(), **node_args())
        for _ in range(3):
            c.add_node(num_cpus=4, **node_args())
        c.wait_for_nodes()
        yield c, f"http://127.0.0.1:{dash}"
    finally:
        c.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 400) -> dict | list:
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < end, f"{path.name} not written in {timeout_s:.0f}s"
        time.sleep(1)
    return json.loads(path.read_text())


def finished_episodes(run_dir: Path) -> int:
    return sum(1 for _ in (run_dir / "episodes").rglob("*.parquet"))


def check_layout(servers: list[dict], cfg: dict) -> None:
    by_node: dict[str, list[dict]] = {}
    for s in servers:
        by_node.setdefault(s["node_id"], []).append(s)
        gpus = 4 if s["model_name"] != "usersim" else 1  # the catalog: TP4, and TP1
        assert len(s["gpu_ids"]) == gpus, s
        assert not s["base_url"].startswith("http://127.0.0.1"), s  # reachable from nodes
    for node, held in by_node.items():
        ids = [g for s in held for g in s["gpu_ids"]]
        assert len(ids) == len(set(ids)) <= GPUS_PER_NODE, (node, held)  # no GPU twice
    for model, mc in cfg["models"].items():
        nodes = [s["node_id"] for s in servers if s["model_name"] == model]
        assert len(nodes) == mc["replicas"] == 2, model
    # replicas spread: at least all but the last-placed model hold two nodes each
    spread = sum(len({s["node_id"] for s in servers if s["model_name"] == m}) == 2
                 for m in cfg["models"])
    assert spread >= len(cfg["models"]) - 1, servers


def engine_key(server: dict) -> str:
    """The key an engine was started with, from its environment (VLLM_API_KEY, as vLLM
    reads it): the test bed's nodes share this machine, so its /proc is readable here."""
    environ = Path(f"/proc/{server['pid']}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"VLLM_API_KEY="))


def check_keyed(servers: list[dict]) -> str:
    """Each engine: 401 without the key or with another, 200 with it; one key for the run."""
    keys = {engine_key(s) for s in servers}
    assert len(keys) == 1, "one per-run key for every engine"
    key = keys.pop()
    chat = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    for s in servers:
        url = s["base_url"]
        assert httpx.get(url + "/models", timeout=10).status_code == 401, s
        assert httpx.post(url + "/chat/completions", json=chat, timeout=10).status_code == 401, s
        wrong = {"Authorization": "Bearer not-the-key"}
        assert httpx.get(url + "/models", headers=wrong, timeout=10).status_code == 401, s
        right = {"Authorization": f"Bearer {key}"}
        assert httpx.get(url + "/models", headers=right, timeout=10).status_code == 200, s
    return key


def test_the_paper_pool_on_a_four_node_cluster_survives_a_node_loss(cluster, tmp_path):
    c, dashboard = cluster
    cfg = bed_config(tmp_path)
    path = tmp_path / "bed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_dir = Path(cfg["output_dir"]) / "bed"
    env = {**os.environ, "RAY_ADDRESS": c.address}
    run = subprocess.Popen([sys.executable, "-m", "edv_ray.cli", "run", str(path), "--no-progress"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        workers = wait_for(run_dir / "workers.json", run)
        servers = json.loads((run_dir / "servers.json").read_text())
        check_layout(servers, cfg)
        key = check_keyed(servers)  # the engines on node addresses refuse anyone else
        # one worker per node, none on the driver's node (it holds the driver and run state)
        assert len(set(workers["workers"])) == 3
        assert workers["driver_node"] not in workers["workers"]
        # the node to lose: not the driver's, holds a worker and at least one server
        nodes = {n.node_id: n for n in c.list_all_nodes()}
        lost = next(n for n in set(workers["workers"]) - {workers["driver_node"]}
                    if any(s["node_id"] == n for s in servers))
        end = time.monotonic() + 300
        while finished_episodes(run_dir) < 6:
            assert run.poll() is None and time.monotonic() < end, run.communicate()[0][-4000:]
            time.sleep(0.5)
        c.remove_node(nodes[lost])
        removed_at = time.time()  # the node's processes are gone
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode in (0, 4), out[-4000:]
    print(out)
    assert "cluster: 4 node(s), 32 GPU(s)" in out and "episode workers: 3 on 3 node(s)" in out
    for s in (s for s in servers if s["node_id"] == lost):
        assert f"server {s['server_id']} is unreachable" in out, out[-3000:]
        assert (f"server {s['server_id']} is back on node" in out
                or f"{s['model_name']} goes on with 1 of 2 replica(s)" in out), out[-3000:]
    con = connect(run_dir)
    lost_attempts, rerun_ok = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM episode_attempts b "
        "  WHERE b.episode_id = a.episode_id AND b.attempt = a.attempt + 1 "
        "  AND b.status = 'ok')) "
        "FROM episode_attempts a WHERE status = 'error' AND error LIKE '%worker lost%'"
    ).fetchone()
    # the lost worker had episodes in flight; they ran again in the run, on other workers
    assert lost_attempts > 0 and rerun_ok > 0, (lost_attempts, rerun_ok)
    answered = con.execute("SELECT count(*) FROM llm_calls WHERE ok AND started_at > ?",
                           [removed_at]).fetchone()[0]
    con.close()
    assert answered > 0  # the run went on after the loss, on the servers left

    # a replacement node joins (as an autoscaler would add one); resume as a Ray job
    c.add_node(num_cpus=4, **node_args())
    c.wait_for_nodes()
    sub = subprocess.run([sys.executable, "-m", "edv_ray.cli", "submit", "--resume",
                          str(run_dir), "--address", dashboard], env=os.environ.copy(),
                         capture_output=True, text=True, timeout=900)
    assert sub.returncode == 0 and "SUCCEEDED" in sub.stdout, sub.stdout[-4000:] + sub.stderr[-2000:]
    con = connect(run_dir)
    rows = con.execute("SELECT episode_id, status FROM episodes").fetchall()
    attempts = con.execute("SELECT episode_id, attempt FROM episode_attempts").fetchall()
    con.close()
    expected = 3 * TASKS * TRIALS  # three executors x tasks x trials
    assert len(rows) == len({e for e, _ in rows}) == expected  # 0 lost, 0 doubled
    assert Counter(s for _, s in rows) == {"ok": expected}
    assert len(attempts) == len(set(attempts))  # no attempt written twice
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaks == [] and key not in out + sub.stdout + sub.stderr, leaks
