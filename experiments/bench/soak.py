"""Soak: thousands of episodes on the scripted server with faults injected at random —
HTTP 500s, hangs past the client timeout, the model server down for seconds, and SIGKILL
of an episode worker — then `--resume` until complete. Prints: episodes, faults
injected, error rows before / after resume, episodes counted more than once (must be 0),
and the driver's RSS over time (must stay flat) plus peak worker RSS.

    .venv/bin/python experiments/bench/soak.py --episodes 2000 --concurrency 32
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def worker_pids() -> list[int]:
    """This driver's episode-worker processes (descendants of our own Ray; by pid)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "EpisodeWorker" in " ".join(p.cmdline()) or "EpisodeWorker" in p.name():
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def rss_mb(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


def inject_faults(server, stop: threading.Event, counts: dict, seed: int, every_s: float) -> None:
    rng = random.Random(seed)
    while not stop.wait(every_s):
        kind = rng.choice(["500", "timeout", "down", "kill"])
        if kind in ("500", "timeout"):
            server.fail_next(kind, rng.randint(1, 6))
        elif kind == "down":
            server.down(rng.uniform(2.0, 8.0))
        else:
            pids = worker_pids()
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
        counts[kind] = counts.get(kind, 0) + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fault-every", type=float, default=4.0, help="seconds between faults")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import psutil
    import ray
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict
    from edv_ray.results.views import connect
    from edv_ray.testing.helpers import scripted_config, tau2_tasks
    from edv_ray.testing.scripted_server import ScriptedServer

    from edv_ray.envs.tau2.tasks import has_ticket

    tasks = [t for t in tau2_tasks("mock") if has_ticket(t) and "nl_eval" not in t.id]
    trials = max(1, -(-args.episodes // len(tasks)))
    server = ScriptedServer({("mock", t.id): t for t in tasks}).start()
    server.hang_s = 8.0
    out = Path(tempfile.mkdtemp(prefix="edv-soak-"))
    cfg = load_config_dict(scripted_config(
        server.base_url, out,
        agents=[{"name": "gold", "model": "scripted", "prompt_strategy": "text_tools"}],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
                   "task_ids": [t.id for t in tasks]},
        runtime={"concurrency": args.concurrency, "workers": args.workers, "trials": trials,
                 "episode_timeout_s": 120},
        llm={"timeout_s": 4, "max_retries": 2}))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level="ERROR")
    driver = psutil.Process()
    samples: list[tuple[float, float]] = []
    stop, counts = threading.Event(), {}

    def sample() -> None:
        t0 = time.monotonic()
        while not stop.wait(2.0):
            samples.append((time.monotonic() - t0, driver.memory_info().rss / 2**20))

    peak_worker = [0.0]

    def watch_workers() -> None:
        while not stop.wait(5.0):
            try:
                peak_worker[0] = max([peak_worker[0], *(rss_mb(p) for p in worker_pids())])
            except Exception:  # noqa: BLE001 - state API busy during a kill
                pass

    threads = [threading.Thread(target=f, daemon=True) for f in (sample, watch_workers)]
    threads.append(threading.Thread(target=inject_faults, daemon=True,
                                    args=(server, stop, counts, args.seed, args.fault_every)))
    for t in threads:
        t.start()
    t0 = time.monotonic()
    res = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=True)
    stop.set()
    first_wall = time.monotonic() - t0
    server.clear_faults()
    errors_before = res.errors
    passes = 0
    while not res.complete and passes < 5:
        passes += 1
        res = pipeline.execute(*pipeline.prepare(None, str(run_dir)), console=Console(quiet=True),
                               show_progress=False)
    con = connect(run_dir)
    n, distinct, dup = con.execute(
        "SELECT count(*), count(DISTINCT episode_id), count(*) - count(DISTINCT (task_id, trial)) "
        "FROM episodes").fetchone()
    attempts = con.execute("SELECT count(*) FROM episode_attempts").fetchone()[0]
    ok = con.execute("SELECT count(*) FILTER (WHERE status = 'ok') FROM episodes").fetchone()[0]
    rss = [r for _, r in samples]
    third = max(1, len(rss) // 3)
    print(f"episodes {n} (distinct ids {distinct}, counted twice {dup}); attempts on disk {attempts}")
    print(f"faults injected {sum(counts.values())}: {counts}")
    print(f"error rows after the faulty pass {errors_before}; after {passes} resume pass(es) "
          f"{res.errors}; ok {ok}/{n}; first pass wall {first_wall:.0f} s")
    if rss:
        print(f"driver RSS MB: start {rss[0]:.0f}, first third mean {sum(rss[:third]) / third:.0f}, "
              f"last third mean {sum(rss[-third:]) / third:.0f}, peak {max(rss):.0f}")
    print(f"peak episode-worker RSS MB {peak_worker[0]:.0f}; run folder {run_dir}")
    server.stop()


if __name__ == "__main__":
    main()
