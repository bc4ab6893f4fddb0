"""Gold replay: the scripted OpenAI-compatible server replays each task's gold actions
through the full edv path (Ray workers → τ²-bench orchestrator → grading → Parquet →
DuckDB). Pass@1 must be 1.0: anything else is a bug in the episode path.

    .venv/bin/python experiments/gold_replay.py --domain airline --split test --concurrency 16
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("WANDB_MODE", "disabled")


def main() -> int:
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict
    from edv_ray.results.views import connect
    from edv_ray.testing.helpers import scripted_config, tau2_tasks
    from edv_ray.testing.scripted_server import ScriptedServer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="airline")
    ap.add_argument("--split", default="test")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="episode-runner processes")
    ap.add_argument("--strategy", default="native_tools")
    ap.add_argument("--out", default=None, help="output dir (default: a temp dir)")
    args = ap.parse_args()

    tasks = {(args.domain, t.id): t for t in tau2_tasks(args.domain, args.split)}
    server = ScriptedServer(tasks).start()
    out = Path(args.out or tempfile.mkdtemp(prefix="gold-"))
    cfg = load_config_dict(scripted_config(
        server.base_url, out, run_id=f"gold-{args.domain}-c{args.concurrency}",
        agents=[{"name": "gold", "model": "scripted", "prompt_strategy": args.strategy}],
        benchmark={"domains": [args.domain], "split": args.split, "num_tasks": None},
        runtime={"concurrency": args.concurrency, "workers": args.workers,
                 "episode_timeout_s": 300}))
    cfg, run_id, run_dir = pipeline.prepare_from(cfg)
    t0 = time.monotonic()
    pipeline.execute(cfg, run_id, run_dir, console=Console())
    wall = time.monotonic() - t0
    n, p1 = connect(run_dir).execute(
        "SELECT count(*), avg(CAST(success AS DOUBLE)) FROM episodes").fetchone()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"gold replay {args.domain}/{args.split}: rows={n} pass@1={p1:.3f} "
          f"concurrency={args.concurrency} workers={args.workers} wall={wall:.1f}s driver_peak_rss={rss_mb:.0f}MB "
          f"run_dir={run_dir}")
    server.stop()
    return 0 if (n == len(tasks) and p1 == 1.0) else 1


if __name__ == "__main__":
    sys.exit(main())
