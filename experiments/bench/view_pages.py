"""How fast `edv view` answers on a large run: every page through the viewer's own app
(:func:`edv_ray.view.app.make_app`, Starlette's TestClient: routing, queries, templates,
headers), against the issue's target of < 300 ms per page at 10⁵ episodes.

The run is a synthetic EDV construction run of ``--tasks`` training tasks × 2 executors ×
``--epochs`` (+ inference), built by :mod:`view_run` with the project's own writers and
laid out as a real run of that size (episode segments of 2,000, per-epoch EDV segments,
banks); ``--run RUN_DIR`` times a real run folder instead. Each page is requested
``--repeat`` times: the first request (cold: DuckDB reads the files, the overview and
compare pages compute what they cache) and the median / max of the others are printed,
with whether the median and the first are under the target. Then the W&B Tables'
queries (:mod:`edv_ray.report.wandb_tables`) are timed on the same folder.

    .venv/bin/python experiments/bench/view_pages.py                       # 10⁵ episodes
    .venv/bin/python experiments/bench/view_pages.py --tasks 1000          # a quick look
    .venv/bin/python experiments/bench/view_pages.py --out /tmp/vp --keep  # build once, reuse
    .venv/bin/python experiments/bench/view_pages.py --run runs/<id>
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

sys.path.insert(0, str(Path(__file__).parent))

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def pick(run_dir: Path) -> dict:
    """The ids the pages are timed on, chosen as the hardest cases the run has."""
    from edv_ray.results.views import connect
    from edv_ray.view.sql import ensure_views

    con = connect(run_dir)
    ensure_views(con)
    one = lambda sql: (con.execute(sql).fetchone() or [None])[0]
    out = {
        # the item retrieved most often: the longest list of retrieving episodes
        "item_hot": one("""SELECT item_id FROM (SELECT unnest(retrieved_item_ids) AS item_id
                           FROM episodes) GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"""),
        "item_any": one("SELECT item_id FROM view_items WHERE kind = 'edv' ORDER BY item_id LIMIT 1 OFFSET 777"),
        "candidate": one("SELECT item_id FROM view_items WHERE kind = 'candidate' ORDER BY item_id LIMIT 1"),
        # an episode with a memory block, and one that was evidence for candidates and votes
        "episode_mem": one("""SELECT episode_id FROM episodes WHERE len(retrieved_item_ids) > 0
                              ORDER BY episode_id LIMIT 1 OFFSET 500"""),
        "episode_evidence": one("""SELECT e FROM (SELECT unnest(supporting_episode_ids) AS e
                                   FROM candidates) ORDER BY e LIMIT 1 OFFSET 100"""),
        "domain": one("SELECT domain FROM view_items GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"),
        "task_type": one("SELECT task_type FROM episodes GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"),
        "items": one("SELECT count(*) FROM view_items"),
        "episodes": one("SELECT count(*) FROM episodes"),
        "epoch": one("SELECT max(epoch) FROM view_items"),
    }
    out["filtered"] = con.execute(
        "SELECT count(*) FROM view_items WHERE method = 'edv' AND bank = 'shared' AND domain = ? "
        "AND epoch = ?", [out["domain"], out["epoch"]]).fetchone()[0]
    con.close()
    return out


def pages(ids: dict, per_page: int = 50) -> list[tuple[str, str]]:
    def memory(**f) -> str:
        return "/memory?" + urlencode({k: v for k, v in f.items() if v is not None})

    last = max(1, -(-ids["items"] // per_page))
    filt = dict(method="edv", bank="shared", domain=ids["domain"], epoch=ids["epoch"])
    out = [("overview", "/"),
           ("memory list p1", memory()),
           (f"memory list p{last} (last)", memory(page=last)),
           ("memory filtered p1", memory(**filt)),
           ("memory filtered last", memory(**filt, page=max(1, -(-ids["filtered"] // per_page)))),
           ("memory by task type p1", memory(task_type=ids["task_type"])),
           ("episodes list p1", "/episodes"),
           ("episodes list last", f"/episodes?page={max(1, -(-ids['episodes'] // per_page))}"),
           ("episodes filtered", "/episodes?stage=execute&outcome=failure&agent=a&page=20")]
    for key, label in (("item_hot", "memory item (most retrieved)"), ("item_any", "memory item"),
                       ("candidate", "rejected candidate")):
        if ids[key]:
            out.append((label, "/memory/" + quote(ids[key], safe="")))
    for key, label in (("episode_mem", "episode (memory block)"),
                       ("episode_evidence", "episode (used as evidence)")):
        if ids[key]:
            out.append((label, "/episode/" + quote(ids[key], safe="")))
    out.append(("compare", "/compare"))
    return out


def time_pages(run_dir: Path, repeat: int, target_ms: float) -> list[dict]:
    from starlette.testclient import TestClient

    from edv_ray.view.app import make_app

    t0, c0 = time.perf_counter(), time.process_time()
    app = make_app([run_dir])
    start_ms, start_cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    ids = pick(run_dir)
    print(f"app start (connect + views): {start_ms:.0f} ms (cpu {start_cpu:.0f} ms); "
          f"{ids['episodes']:,} episodes, {ids['items']:,} memory rows", flush=True)
    results = []
    with TestClient(app) as client:
        for label, url in pages(ids):
            times, cpu, status, size = [], [], None, 0
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                r = client.get(url)
                times.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
                status, size = r.status_code, len(r.content)
            warm, warm_cpu = times[1:] or times, cpu[1:] or cpu
            results.append(dict(page=label, url=url, status=status, kb=size / 1024, first=times[0],
                                median=statistics.median(warm), max=max(warm),
                                cpu_first=cpu[0], cpu=statistics.median(warm_cpu)))
            print(f"  {label}: first {times[0]:.0f} ms, median {statistics.median(warm):.0f} ms "
                  f"({status})", flush=True)
    return results


def print_table(results: list[dict], target_ms: float) -> None:
    w = max(len(r["page"]) for r in results)
    print(f"\n{'page':<{w}}  status     KB   first ms  median ms   max ms  cpu first  cpu median"
          f"  median < {target_ms:.0f} ms")
    for r in results:
        ok = "yes" if r["median"] < target_ms else "NO"
        ok += "" if r["first"] < target_ms else " (first: NO)"
        print(f"{r['page']:<{w}}  {r['status']:>6} {r['kb']:>6.0f} {r['first']:>10.0f} "
              f"{r['median']:>10.0f} {r['max']:>8.0f} {r['cpu_first']:>10.0f} {r['cpu']:>11.0f}  {ok}")
    print("(cpu: this process's CPU time over all its threads — on a loaded machine, a bound on "
          "what the page costs unloaded; DuckDB may use both cores, so wall time can be lower)")


def time_wandb_tables(run_dir: Path) -> None:
    from edv_ray.report import wandb_tables as WT
    from edv_ray.results.views import connect

    con = connect(run_dir)
    t = time.perf_counter()
    rows, total = WT.experience_rows(con)
    t1 = time.perf_counter()
    eps = WT.episode_rows(con)
    t2 = time.perf_counter()
    print(f"\nW&B tables: experiences {len(rows):,} of {total:,} rows in {(t1 - t) * 1000:.0f} ms; "
          f"episodes sample {len(eps)} rows in {(t2 - t1) * 1000:.0f} ms")
    con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="time this run folder (nothing is built)")
    ap.add_argument("--out", type=Path, help="build the synthetic run here (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the built folder; reuse --out if built")
    ap.add_argument("--tasks", type=int, default=25_000, help="training tasks (×2 executors ×epochs)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--test-tasks", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=300.0)
    args = ap.parse_args(argv)
    print(f"load before: {loadavg()} on {os.cpu_count()} cores", flush=True)
    temp = None
    if args.run is not None:
        run_dir = args.run
    else:
        run_dir = args.out or Path(temp := tempfile.mkdtemp(prefix="edv-view-bench-")) / "run"
        if args.keep and (run_dir / "episodes").is_dir():
            print(f"reusing {run_dir}", flush=True)
        else:
            from view_run import Builder

            if run_dir.exists():
                shutil.rmtree(run_dir)
            t = time.perf_counter()
            Builder(run_dir, args.tasks, args.epochs, args.test_tasks, args.seed).build()
            size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
            files = sum(1 for p in run_dir.rglob("*") if p.is_file())
            print(f"built in {time.perf_counter() - t:.0f} s: {files} files, {size / 2**20:.0f} MB",
                  flush=True)
    try:
        results = time_pages(run_dir, args.repeat, args.target_ms)
        print_table(results, args.target_ms)
        time_wandb_tables(run_dir)
    finally:
        print(f"load after: {loadavg()}")
        if temp is not None and not args.keep:
            shutil.rmtree(temp, ignore_errors=True)
    return 0 if all(r["median"] < args.target_ms and r["status"] == 200 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
