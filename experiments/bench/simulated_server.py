"""Throughput of the simulated engine (``engine: simulated``) on one core.

Records real requests first — an airline episode (agent turns with three retrieved items
in the system prompt, user turns) and EDV distill / vote calls, made by the framework's
own code against an in-process engine — then replays them against the engine's server
process pinned to one core (``taskset``) from client threads on the other cores, and
reports calls per second of wall time and per CPU-second of the server process (its
capacity on one core, whatever the client costs).

    .venv/bin/python experiments/bench/simulated_server.py --calls 3000 --threads 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROFILE = {"agents": {"a": {"success": {"default": 0.6}}, "b": {"success": {"default": 0.4}},
                      "c": {"success": {"default": 0.5}}}}
BENCH = [{"name": "tau2", "domains": ["airline"]}]


def record() -> dict[str, list[dict]]:
    """Real request bodies by kind (agent, user_sim, distill, vote)."""
    from edv_ray.envs.tau2.env import render_transcript
    from edv_ray.methods.edv.records import TrajectoryView
    from edv_ray.methods.edv.stages import distill, vote
    from edv_ray.simulation.server import Simulator
    from edv_ray.testing.helpers import tau2_tasks
    from tests.simulation.sim_helpers import caller, ctx, play_tau2, serving

    got: dict[str, list[dict]] = {}
    original = Simulator.respond

    def respond(self, req):
        role = req["user"].split("|")[1]
        kind = {"distiller": "distill", "verifier": "vote"}.get(role, role)
        got.setdefault(kind, []).append({k: v for k, v in req.items() if not k.startswith("_")})
        return original(self, req)

    Simulator.respond = respond
    try:
        task = next(t for t in tau2_tasks("airline", "test") if t.evaluation_criteria.actions)
        with serving(PROFILE, BENCH) as (sim, ep):
            items = [f"### lesson {i}\nRule: check the reservation first. "
                     + sim.codec.item_tag(True, "airline/airline", "c", str(i)) for i in range(3)]
            out = play_tau2(ep, "a", task, domain="airline", experiences=items)
            runs = [TrajectoryView(label="T1", episode_id="e1", agent="a", success=out.success,
                                   reward=out.reward, transcript=render_transcript(out.messages, 10 ** 6))]
            res = distill(out.observed_text, "policy", runs, caller(ep, ctx("distiller", "c", "airline", task.id)),
                          sees_reward=True, max_candidates=3, retries=0)
            for e in res.experiences:
                vote(out.observed_text, "policy", runs, e.title, e.when_to_use, e.rule,
                     caller(ep, ctx("verifier", "a", "airline", task.id)), retries=0, sees_reward=True)
    finally:
        Simulator.respond = original
    return got


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def blast(url: str, bodies: list[bytes], calls: int, threads: int) -> float:
    import httpx

    done = [0]
    lock = threading.Lock()

    def worker():
        with httpx.Client(timeout=30) as client:
            while True:
                with lock:
                    i = done[0]
                    done[0] += 1
                if i >= calls:
                    return
                r = client.post(url, content=bodies[i % len(bodies)],
                                headers={"Content-Type": "application/json"})
                r.raise_for_status()

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    got = record()
    spec = Path(tempfile.mkdtemp()) / "spec.json"
    spec.write_text(json.dumps({"served_name": "sim", "profile": PROFILE, "benchmarks": BENCH}))
    port = 18000 + os.getpid() % 1000
    proc = subprocess.Popen(["taskset", "-c", str(args.core), sys.executable, "-m",
                             "edv_ray.simulation.server", "--spec", str(spec), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        proc.stdout.readline()  # listening
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        print(f"{'kind':>9} {'bytes/call':>10} {'calls':>6} {'calls/s (wall)':>15} {'calls per server CPU-s':>22}")
        mix = [json.dumps(b).encode() for kind in ("agent", "user_sim", "distill", "vote")
               for b in got.get(kind, [])]
        for kind, bodies in [(k, [json.dumps(b).encode() for b in got[k]]) for k in sorted(got)] + [("mix", mix)]:
            blast(url, bodies, min(200, args.calls), args.threads)  # warm
            c0 = cpu_seconds(proc.pid)
            wall = blast(url, bodies, args.calls, args.threads)
            cpu = cpu_seconds(proc.pid) - c0
            size = sum(map(len, bodies)) // len(bodies)
            print(f"{kind:>9} {size:>10} {args.calls:>6} {args.calls / wall:>15.0f} {args.calls / cpu:>22.0f}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
