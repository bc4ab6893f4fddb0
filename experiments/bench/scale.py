"""Cluster scale in simulation: ≥1,000 τ²-bench episodes (mock domain, solo mode, gold
replay) at 64–256 in flight over 1–4 workers, against a scripted server (in its own
process) answering after 1–5 s; then listing + DuckDB query time over many small
per-episode Parquet files, with and without compaction.

    .venv/bin/python experiments/bench/scale.py                        # the default grid
    .venv/bin/python experiments/bench/scale.py --grid 1:128:2 --episodes 1000
    .venv/bin/python experiments/bench/scale.py --skip-files --grid 1:128:2 --repeat 3
    .venv/bin/python experiments/bench/scale.py --skip-files --grid 1:128:2,1:128:2:litellm --repeat 3
    .venv/bin/python experiments/bench/scale.py --skip-runs --files 100000 --uncompacted-files 10000

Grid entries are ``delay_s:in_flight:workers[:transport]`` (transport: ``auto``, the
default — the direct OpenAI wire path to this self-served server —, ``litellm`` or
``openai_sdk``; see ``edv_ray/llm/transport.py``). Printed per entry: wall, throughput, the
LLM-bound ideal (each episode's calls × delay packed into the in-flight slots) and the
ratio, client-seen latency, driver and worker peak RSS, and where slots stood idle (first
fill, between episodes, drain).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import TreeSampler, ideal_wall

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

_SERVER = """
import sys, time
from edv_ray.testing.helpers import tau2_tasks
from edv_ray.testing.scripted_server import ScriptedServer
s = ScriptedServer({("mock", t.id): t for t in tau2_tasks("mock")}).start()
s.delay_s = float(sys.argv[1])
print(s.base_url, flush=True)
sys.stdin.read()
"""


def scripted_server(delay_s: float):
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(delay_s)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    return proc, proc.stdout.readline().strip()


def run_one(delay: float, in_flight: int, workers: int, episodes: int,
            transport: str = "auto", keep: bool = False,
            start_interval_s: float | None = None) -> dict:
    import ray
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict
    from edv_ray.envs.tau2.tasks import has_ticket
    from edv_ray.results.views import connect
    from edv_ray.testing.helpers import scripted_config, tau2_tasks

    tasks = [t.id for t in tau2_tasks("mock") if has_ticket(t)]
    proc, url = scripted_server(delay)
    try:
        out = Path(tempfile.mkdtemp(prefix="scale-"))
        cfg = load_config_dict(scripted_config(
            url, out, run_id=f"scale-{delay}-{in_flight}-{workers}-{transport}",
            agents=[{"name": "gold", "model": "scripted", "prompt_strategy": "native_tools"}],
            roles={}, benchmark={"domains": ["mock"], "split": "all", "task_ids": tasks,
                                 "num_tasks": None, "solo": "always", "max_steps": 30},
            runtime={"concurrency": in_flight, "workers": workers,
                     "trials": math.ceil(episodes / len(tasks)), "episode_timeout_s": 900,
                     **({} if start_interval_s is None
                        else {"start_interval_s": start_interval_s})},
            llm={"timeout_s": 60, "max_retries": 2, "transport": transport}))
        cfg, run_id, run_dir = pipeline.prepare_from(cfg)
        sampler = TreeSampler(period_s=0.5, named={proc.pid: "server"}).start()
        t0 = time.time()
        pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
        wall = time.time() - t0
        sampler.stop()
    finally:
        proc.kill()
        if ray.is_initialized():
            ray.shutdown()
    con = connect(run_dir)
    n, ok, p1, first, last = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE status='ok'), avg(CAST(success AS DOUBLE)), "
        "min(started_at), max(started_at + wall_s) FROM episodes").fetchone()
    calls = [c for (c,) in con.execute(
        "SELECT count(*) FROM llm_calls GROUP BY episode_id ORDER BY min(started_at)").fetchall()]
    lat, p95 = con.execute("SELECT avg(latency_s), quantile_cont(latency_s, 0.95) "
                           "FROM llm_calls").fetchone()
    spans = con.execute("SELECT started_at, started_at + wall_s FROM episodes").fetchall()
    con.close()
    if keep:
        print(f"  run folder kept: {run_dir}", flush=True)
    else:
        shutil.rmtree(out, ignore_errors=True)
    phase = last - first
    ideal = ideal_wall(calls, delay, in_flight)
    rss = sampler.peak_rss_mb()
    return dict(delay=delay, in_flight=in_flight, workers=workers, episodes=n, ok=ok, pass1=p1,
                wall=wall, phase=phase, ideal=ideal, eps=n / phase, lat=lat, p95=p95,
                driver_mb=rss.get("driver", 0.0), workers_mb=rss.get("workers", 0.0),
                cpu=sampler.cpu_between(first, last), idle=idle_slots(spans, in_flight))


def idle_slots(spans: list[tuple[float, float]], slots: int) -> dict[str, float]:
    """Where the in-flight slots stood idle, in slot-seconds, from the episodes' own
    (start, end) rows: ``fill`` until all slots first run, ``between`` episodes after that
    until the last start (an episode's write and the next one's start), ``drain`` after the
    last start (it includes what the ideal itself leaves idle when the last wave is
    partial). Also each as a share of slots × phase."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    t0, t_end = events[0][0], events[-1][0]
    last_start = max(s for s, _ in spans)
    out = {"fill": 0.0, "between": 0.0, "drain": 0.0}
    running, full, prev = 0, False, t0
    for t, step in events:
        part = "drain" if prev >= last_start else ("between" if full else "fill")
        out[part] += (slots - running) * (t - prev)
        running += step
        full = full or running >= slots
        prev = t
    total = slots * max(t_end - t0, 1e-9)
    out.update({f"{k}_share": v / total for k, v in list(out.items())})
    return out


def parquet_files(n_files: int, compact: bool) -> dict:
    """Synthetic one-row episode files (as the runtime writes them), then the time to list
    them, build the views and query ``episodes``; with ``compact`` the stage is merged
    into one file first (:func:`edv_ray.results.store.compact_stage`)."""
    from edv_ray.results.parquet_io import write_rows_atomic
    from edv_ray.results.schema import EPISODE_SCHEMA
    from edv_ray.results.store import RunStore, compact_stage
    from edv_ray.results.views import connect

    run_dir = Path(tempfile.mkdtemp(prefix="scale-files-"))
    store = RunStore(run_dir)
    t0 = time.time()
    base = {f.name: None for f in EPISODE_SCHEMA}
    for i in range(n_files):
        row = dict(base, run_id="r", method="no_memory", epoch=0, domain="mock",
                   task_id=f"t{i % 97}", task_type="mock", trial=i, attempt=1,
                   episode_id=f"eval-e0-mock-t{i}", agent="gold", status="ok", success=i % 3 > 0,
                   reward=float(i % 3 > 0), wall_s=1.0, started_at=float(i))
        write_rows_atomic([row], store.episode_path("eval", row["episode_id"], 1), EPISODE_SCHEMA)
        if (i + 1) % 10_000 == 0 or i + 1 == n_files:
            print(f"\r  wrote {i + 1:,}/{n_files:,} episode files", end="", flush=True)
    print(flush=True)
    written = time.time() - t0
    out = dict(files=n_files, write_s=written, compact_s=None)
    if compact:
        t0 = time.time()
        compact_stage(run_dir, "eval")
        out["compact_s"] = time.time() - t0
    t0 = time.time()
    listed = sum(len(fs) for _d, _s, fs in os.walk(run_dir / "episodes"))
    out["list_s"], out["listed"] = time.time() - t0, listed
    print(f"  {'compacted' if compact else 'per-episode'} files: building the DuckDB views",
          flush=True)
    t0 = time.time()
    con = connect(run_dir)
    out["connect_s"] = time.time() - t0
    t0 = time.time()
    n, _p1 = con.execute("SELECT count(*), avg(CAST(success AS DOUBLE)) FROM episodes").fetchone()
    out["query_s"], out["rows"] = time.time() - t0, n
    con.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    return out


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="1:64:1,1:128:2,1:128:2:litellm,1:256:4,5:256:2",
                    help="comma list of delay_s:in_flight:workers")
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--files", type=int, default=100_000,
                    help="episode files written, then compacted and queried")
    ap.add_argument("--uncompacted-files", type=int, default=10_000,
                    help="episode files queried without compaction (DuckDB's views over "
                         "10⁵ one-row files took >16 GB and were OOM-killed on 24 GB)")
    ap.add_argument("--keep", action="store_true", help="keep each run's folder (printed)")
    ap.add_argument("--start-interval", type=float, default=None,
                    help="runtime.start_interval_s (default: the config's)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per grid entry (identical runs on a small VM spread by several "
                         "points of ideal/phase); with >1, a median/min/max line per entry")
    ap.add_argument("--skip-runs", action="store_true")
    ap.add_argument("--skip-files", action="store_true")
    args = ap.parse_args()
    console = Console(width=200)
    if not args.skip_runs:
        table = Table(title=f"mock/solo gold replay, ≥{args.episodes} episodes per row")
        for col in ("s/call", "in flight", "workers", "transport", "episodes", "pass@1", "wall s",
                    "episode phase s", "ideal s", "ideal/phase", "episodes/s",
                    "latency mean/p95 s", "driver RSS MB", "workers RSS MB", "CPU s/episode"):
            table.add_column(col, justify="right")
        verdicts: list[str] = []
        ratios: dict[str, list[float]] = {}
        # repeats interleave (A B A B …), so a machine's drift over minutes hits every entry
        for entry in [e for _ in range(max(1, args.repeat)) for e in args.grid.split(",")]:
            d, f, w, *t = entry.split(":")
            transport = t[0] if t else "auto"
            r = run_one(float(d), int(f), int(w), args.episodes, transport, args.keep,
                        args.start_interval)
            ratio = r["ideal"] / r["phase"]
            ratios.setdefault(entry, []).append(ratio)
            cpu = sum(v for g, v in r["cpu"].items() if g in ("driver", "workers"))
            cores = {g: v / r["phase"] for g, v in r["cpu"].items()}
            table.add_row(d, f, w, transport, str(r["episodes"]), f"{r['pass1']:.2f}", f"{r['wall']:.1f}",
                          f"{r['phase']:.1f}", f"{r['ideal']:.1f}",
                          f"{ratio:.2f}", f"{r['eps']:.1f}",
                          f"{r['lat']:.2f}/{r['p95']:.2f}", f"{r['driver_mb']:.0f}",
                          f"{r['workers_mb']:.0f}", f"{cpu / max(1, r['episodes']):.3f}")
            if float(d) == 1.0 and int(f) == 128:
                verdicts.append(f"{entry}: {ratio:.2f} × the LLM-bound ideal "
                                f"(target ≥ 0.9 at 1 s/call, 128 in flight): "
                                f"{'MET' if ratio >= 0.9 else 'not met'}")
            idle = r["idle"]
            console.print(f"done {entry}: idle slot-seconds: first fill {idle['fill']:.0f} "
                          f"({idle['fill_share']:.1%}), between episodes {idle['between']:.0f} "
                          f"({idle['between_share']:.1%}), drain {idle['drain']:.0f} "
                          f"({idle['drain_share']:.1%})")
            console.print(f"done {entry}: {r['episodes']} episodes, phase {r['phase']:.1f}s; "
                          "cores busy during the phase: " + ", ".join(
                              f"{g} {c:.2f}" for g, c in sorted(cores.items())))
        console.print(table)
        for line in verdicts:
            console.print(line)
        if args.repeat > 1:
            for entry, rs in ratios.items():
                console.print(f"{entry}: ideal/phase over {len(rs)} runs: median "
                              f"{statistics.median(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f})")
    if not args.skip_files:
        table = Table(title="one-row episode files: listing and DuckDB, before/after compaction")
        for col in ("episodes", "compacted", "write s", "compact s", "list s", "files listed",
                    "connect s", "query s", "rows"):
            table.add_column(col, justify="right")
        for n, compact in ((args.uncompacted_files, False), (args.files, True)):
            r = parquet_files(n, compact)
            table.add_row(f"{n:,}", str(compact), f"{r['write_s']:.1f}",
                          "-" if r["compact_s"] is None else f"{r['compact_s']:.1f}",
                          f"{r['list_s']:.2f}", str(r["listed"]), f"{r['connect_s']:.2f}",
                          f"{r['query_s']:.2f}", str(r["rows"]))
        console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
