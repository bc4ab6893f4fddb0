"""The whole harness at scale on the simulated pool: an EDV construction run of ≥ 10⁵
episodes — Execute, Distill, Verify, the memory banks, routing and inference, every row
in Parquet — on ``engine: simulated`` (no model: the harness is what is measured).

The benchmark is Mind2Web in its official file layout, written here as a synthetic
release (``--tasks`` single-step training tasks in four website domains, 5 candidates
each, so one model call per episode): τ²-bench's cheap domain (mock) has 9 tasks, and
EDV's construction is one group per training task and epoch, so 10⁵ episodes need tens
of thousands of tasks. Episodes = tasks × 2 executors × trials × epochs (+ the test
tasks' inference). Epochs after the first retrieve from the previous epoch's bank.

For each worker count it prints: episodes, wall time, throughput (episodes/s over the
run, and of the execute stages alone), the driver's RSS against the episodes done (a
line every ``--log-s`` while it runs; at 10 %, 50 % and 100 % of the episodes, the peak,
and the slope per 10k episodes over the second half, so growth shows), the DuckDB time
to open the run folder's views, the slowest view and the whole ``edv report`` after the
run (its episode stages compacted by the run itself), the files the folder holds, and the
load of the machine (``/proc/loadavg``) before and after, and the driver's CPU ms per
episode / stage job (``time.process_time`` of the driver process around each fan-out:
its loop, Ray's client threads in it, compaction), per stage and overall; ``--profile
FILE`` writes a cProfile of the driver over the run, timed by the process's CPU (all its
threads' CPU is charged to what the main thread runs meanwhile; ``pstats`` reads it).

    .venv/bin/python experiments/bench/scale_simulated.py --tasks 25000 --epochs 2 --workers 1,2,4
    .venv/bin/python experiments/bench/scale_simulated.py --tasks 500 --workers 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fan_out_cpu import DriverCpu, print_stage_table, stage_table
from harness import TreeSampler

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

DOMAINS = ("Shopping", "Travel", "Info", "Entertainment")
CANDIDATES = 5  # one multi-choice round (A–E + none): one model call per step

PROFILE = {
    "seed": 0,
    "agents": {
        "a": {"success": {"default": 0.55, "Shopping": 0.75, "Travel": 0.45}},
        "b": {"success": {"default": 0.5, "Travel": 0.7, "Info": 0.65}},
        "c": {"success": {"default": 0.6}},
    },
    "memory": {"gain_correct": 0.05, "harm_wrong": 0.05},
}


# ---- a synthetic Mind2Web release -----------------------------------------------------
def write_release(root: Path, train: int, test: int) -> Path:
    """``train`` / ``test`` single-step tasks, their website domains in turn."""
    from edv_ray.simulation.mind2web_release import write_release as write

    return write(root, [DOMAINS[i % len(DOMAINS)] for i in range(train)],
                 [DOMAINS[i % len(DOMAINS)] for i in range(test)], CANDIDATES)


def run_config(data: Path, out: Path, workers: int, args) -> dict:
    return {
        "run_id": f"scale-sim-w{workers}", "output_dir": str(out), "seed": 0, "method": ["edv"],
        "models": {"sim": {"engine": "simulated", "n_ctx": 131072, "simulation": PROFILE}},
        "agents": [{"name": n, "model": "sim", "prompt_strategy": "native_tools"}
                   for n in ("a", "b", "c")],
        "roles": {"executors": ["a", "b", "c"]},
        "benchmark": {"name": "mind2web", "data_dir": str(data), "split": "test_task",
                      "train_split": "train", "max_steps": 4},
        "runtime": {"concurrency": args.concurrency, "workers": workers, "trials": args.trials,
                    "episode_timeout_s": 600},
        "llm": {"timeout_s": 120, "max_retries": 2, "transport": "openai_sdk"},
        "wandb": {"mode": "disabled"},
        "edv": {"epochs": args.epochs, "poison_per_task": 0},
    }


# ---- one run --------------------------------------------------------------------------
def episodes_done(run_dir: Path) -> int:
    """Episode rows on disk: loose per-episode files plus the rows of compacted segments
    and group-commit batches (read from their footers, so counting stays cheap)."""
    import pyarrow.parquet as pq

    n = 0
    for f in (run_dir / "episodes").glob("stage=*/*.parquet"):
        if f.name.startswith(("compacted", "batch-")):
            try:
                n += pq.ParquetFile(f).metadata.num_rows
            except OSError:  # a segment being renamed into place: the next sample has it
                continue
        else:
            n += 1
    return n


class Monitor(threading.Thread):
    """Every ``period_s``: (seconds, episodes on disk, driver RSS MB), logged as a line so
    a long run shows its progress and its memory while it runs."""

    def __init__(self, run_dir: Path, period_s: float, log) -> None:
        super().__init__(daemon=True)
        import psutil

        self.run_dir, self.period_s, self.log = run_dir, period_s, log
        self.me, self.t0 = psutil.Process(), time.time()
        self.samples: list[tuple[float, int, float]] = []
        self.halt = threading.Event()

    def sample(self) -> None:
        t, n = time.time() - self.t0, episodes_done(self.run_dir)
        mb = self.me.memory_info().rss / 2 ** 20
        self.samples.append((t, n, mb))
        self.log(f"  t={t:7.0f}s episodes={n:8,d} driver RSS={mb:6.0f} MB "
                 f"load={' '.join(Path('/proc/loadavg').read_text().split()[:3])}")

    def run(self) -> None:
        while not self.halt.wait(self.period_s):
            self.sample()

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.sample()


def query_times(run_dir: Path) -> dict:
    """DuckDB over the finished run folder (its episode stages compacted by the run):
    the package imports the views pull in (once per process), opening the views, every
    view's row count, and the whole run report (``edv report``: its tables and validity
    checks) — each timed."""
    import io

    from rich.console import Console

    t0 = time.time()
    from edv_ray.methods.registry import known_methods
    from edv_ray.report.tables import report
    from edv_ray.results.views import connect

    known_methods()  # the method plug-ins (their modules import litellm)
    out = {"import_s": time.time() - t0}
    t0 = time.time()
    con = connect(run_dir)
    out["connect_s"] = time.time() - t0
    views = {}
    for (name,) in con.execute("SHOW TABLES").fetchall():
        if name.startswith("_"):
            continue
        t0 = time.time()
        con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
        views[name] = time.time() - t0
    out["views"] = views
    out["slowest_view"] = max(views, key=views.get)
    out["episodes"], out["pass1"] = con.execute(
        "SELECT count(*), avg(CAST(success AS DOUBLE)) FROM episodes").fetchone()
    out["errors"] = con.execute(  # infrastructure errors (counted as failures, never dropped)
        "SELECT count(*) FROM episodes WHERE status = 'error'").fetchone()[0]
    out["construction"] = con.execute(
        "SELECT count(*) FROM episodes WHERE stage = 'execute'").fetchone()[0]
    out["execute_rate"] = con.execute(
        "SELECT count(*) / (max(started_at + wall_s) - min(started_at)) FROM episodes "
        "WHERE stage = 'execute'").fetchone()[0]
    con.close()
    t0 = time.time()
    report(run_dir, console=Console(file=io.StringIO()), save=False)
    out["report_s"] = time.time() - t0
    per = {}
    for d, _s, fs in os.walk(run_dir):
        rel = Path(d).relative_to(run_dir).parts
        key = "/".join(rel[:2]) if rel else "."
        per[key] = per.get(key, 0) + len(fs)
    out["files"] = sum(per.values())
    out["files_by_folder"] = dict(sorted(per.items(), key=lambda kv: -kv[1])[:8])
    return out


def run_one(data: Path, workers: int, args, log) -> dict:
    import ray
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict

    out = Path(tempfile.mkdtemp(prefix=f"scale-sim-w{workers}-", dir=args.tmp))
    cfg = load_config_dict(run_config(data, out, workers, args))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    sampler = TreeSampler(period_s=args.sample_s).start()
    monitor = Monitor(run_dir, args.log_s, log)
    monitor.start()
    driver = DriverCpu()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU, not wall: waits cost nothing
    t0 = time.time()
    try:
        if profiler is not None:
            profiler.enable()
        result = pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True),
                                  show_progress=False)
    finally:
        wall = time.time() - t0
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{args.profile}.w{workers}")
        driver.restore()
        monitor.stop()
        sampler.stop()
        if ray.is_initialized():
            ray.shutdown()
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    cpu = sampler.cpu_between(t0, t0 + wall)
    q = query_times(run_dir)
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.log_dir) / f"memory_w{workers}.json").write_text(json.dumps(
        {"wall_s": wall, "views": q["views"], "samples": monitor.samples}))
    if args.keep:
        log(f"  run folder kept: {run_dir}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    return {"workers": workers, "complete": result.complete, "wall": wall,
            "load_before": "/".join(load0), "load_after": "/".join(load1),
            "samples": monitor.samples, "cpu": cpu, "peak_rss": sampler.peak_rss_mb(),
            "stages": stage_table(driver.spans, sampler, t0, t0 + wall),
            "driver_cpu": driver.lines(cpu.get("driver", 0.0)), "driver_ms_episode": driver.ms_per_item("episodes"),
            "driver_ms_job": driver.ms_per_item("jobs"), **q}


def rss_summary(samples: list[tuple[float, int, float]]) -> dict:
    """Driver RSS when 10 %, 50 % and all of the episodes were done, its peak, and the
    slope of a least-squares line of RSS against episodes over the second half of the
    episodes, per 10k episodes (steady-state growth: a flat driver shows ~0)."""
    import numpy as np

    n = np.array([x for _, x, _ in samples], dtype=float)
    mb = np.array([m for _, _, m in samples])
    total = n.max() if len(n) else 0.0

    def at(frac):
        i = int(np.searchsorted(n, frac * total))
        return float(mb[min(i, len(mb) - 1)])

    late = n >= total / 2
    slope = (float(np.polyfit(n[late], mb[late], 1)[0]) * 10_000
             if late.sum() > 2 and np.ptp(n[late]) > 0 else float("nan"))
    return {"p10": at(0.1), "p50": at(0.5), "end": at(1.0), "peak": float(mb.max()),
            "slope_per_10k": slope}


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=25_000, help="synthetic training tasks")
    ap.add_argument("--test-tasks", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--workers", default="1,2,4", help="comma list of worker counts")
    ap.add_argument("--concurrency", type=int, default=64, help="episodes in flight")
    ap.add_argument("--sample-s", type=float, default=2.0, help="CPU sampling period")
    ap.add_argument("--log-s", type=float, default=60.0,
                    help="period of the progress / driver-memory lines")
    ap.add_argument("--tmp", default=None, help="where run folders go (default: the system's)")
    ap.add_argument("--log-dir", default=tempfile.gettempdir(),
                    help="where memory_w<N>.json series are written (default: the system's temp)")
    ap.add_argument("--keep", action="store_true", help="keep each run folder")
    ap.add_argument("--profile", default=None,
                    help="write a cProfile of the driver to FILE.w<N> (one per worker count)")
    ap.add_argument("--compact-every", type=int, default=None,
                    help="merge a stage's files into a segment every N (default: the "
                         "framework's COMPACT_EVERY); lower it to see a 10⁵ run's segments "
                         "in a smaller one")
    args = ap.parse_args()
    if args.compact_every is not None:
        from edv_ray.runtime import batch

        batch.COMPACT_EVERY = args.compact_every
    console = Console(width=200)
    data = write_release(Path(tempfile.mkdtemp(prefix="scale-sim-data-", dir=args.tmp)),
                         args.tasks, args.test_tasks)
    planned = args.tasks * 2 * args.trials * args.epochs
    console.print(f"synthetic Mind2Web: {args.tasks:,} training tasks, {args.test_tasks} test "
                  f"tasks; construction episodes planned: {planned:,} (+ inference)")
    rows = []
    try:
        for w in [int(x) for x in args.workers.split(",")]:
            r = run_one(data, w, args, lambda line: console.print(line, highlight=False))
            r["rss_sum"] = rss_summary(r["samples"])
            rows.append(r)
            console.print(f"done: {w} worker(s): {r['episodes']:,} episodes in {r['wall']:.0f} s "
                          f"(complete={r['complete']}, {r['errors']:,} with an error), "
                          f"load {r['load_before']} → {r['load_after']}; "
                          f"CPU s by group: " + ", ".join(f"{g} {v:.0f}" for g, v in
                                                          sorted(r['cpu'].items())))
            console.print("  peak RSS MB by group (summed over its processes): " + ", ".join(
                f"{g} {v:.0f}" for g, v in sorted(r["peak_rss"].items())))
            console.print(f"  files by folder: {r['files_by_folder']}")
            print_stage_table(console, r["stages"], w)
            for line in r["driver_cpu"]:
                console.print(line, highlight=False)
            console.print("  view seconds: " + ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(r["views"].items(), key=lambda kv: -kv[1])[:8]))
    finally:
        shutil.rmtree(data, ignore_errors=True)
    table = Table(title="EDV construction on the simulated pool (synthetic Mind2Web, one call "
                        "per episode)")
    for col in ("workers", "episodes (construction)", "wall s", "episodes/s",
                "execute-stage episodes/s", "driver RSS MB at 10 %/50 %/100 % (peak)",
                "RSS slope MB per 10k episodes", "files", "DuckDB open s",
                "slowest view s", "edv report s", "driver CPU ms per episode / job",
                "load before → after"):
        table.add_column(col, justify="right")
    for r in rows:
        s = r["rss_sum"]
        table.add_row(str(r["workers"]), f"{r['episodes']:,} ({r['construction']:,})",
                      f"{r['wall']:.0f}", f"{r['episodes'] / r['wall']:.1f}",
                      f"{r['execute_rate']:.1f}",
                      f"{s['p10']:.0f}/{s['p50']:.0f}/{s['end']:.0f} ({s['peak']:.0f})",
                      f"{s['slope_per_10k']:+.1f}", f"{r['files']:,}",
                      f"{r['connect_s']:.2f} (+{r['import_s']:.1f} imports)",
                      f"{r['views'][r['slowest_view']]:.2f} ({r['slowest_view']})",
                      f"{r['report_s']:.1f}",
                      f"{r['driver_ms_episode']:.2f} / {r['driver_ms_job']:.2f}",
                      f"{r['load_before']} → {r['load_after']}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
