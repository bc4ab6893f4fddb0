"""Benchmark filtered top-k retrieval: PartitionIndex (faiss IVF) vs exact numpy search.

Builds synthetic banks of 384-d unit vectors shaped like sentence embeddings (domains ->
topics -> items, with Zipf-like topic sizes and items ~0.7 cosine from their topic), with
a few domains and many source tasks (tasks concentrated on a few topics, some items with
merged provenance from several tasks). Each query is a perturbed copy of a random item's
topic, filtered to the item's domain with the item's source tasks excluded
(leave-one-task-out: most near neighbours are excluded). For each size it reports
build time, RSS growth, p50/p99 query latency and recall@k against exact filtered search.

    .venv/bin/python experiments/bench/retrieval.py                    # 10k, 100k, 1M
    .venv/bin/python experiments/bench/retrieval.py --sizes 10000,100000 --queries 500
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _portable_blas_hint() -> None:
    # faiss's bundled OpenBLAS misdetects these CPUs (3x slower IVF training); SkylakeX
    # kernels are right for any CPU with AVX-512. Must be set before faiss/numpy load.
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return
    if " avx512f" in flags:
        os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")


_portable_blas_hint()

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from edv_ray.memory.index import PartitionIndex, faiss_available
from edv_ray.memory.ivf import default_nprobe

DIM = 384
DOMAINS = ("retail", "airline", "telecom", "mock")
DOMAIN_WEIGHTS = (0.4, 0.3, 0.25, 0.05)


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def say(msg: str, end: str = "\n") -> None:
    print(msg, end=end, flush=True)


def _unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


class Synth:
    """Clustered embedding-like data with domain/task metadata."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.n = n
        self.n_topics = max(20, n // 100)
        # a domain direction shared by its topics, so domains occupy regions of space
        dom_dirs = _unit(rng.standard_normal((len(DOMAINS), DIM)).astype(np.float32))
        self.topic_domain = rng.choice(len(DOMAINS), size=self.n_topics, p=DOMAIN_WEIGHTS)
        topics = 0.6 * dom_dirs[self.topic_domain] + rng.standard_normal(
            (self.n_topics, DIM)
        ).astype(np.float32) / np.sqrt(DIM)
        self.topics = _unit(topics.astype(np.float32))
        weights = 1.0 / np.arange(1, self.n_topics + 1) ** 0.8  # Zipf-like topic sizes
        self.topic_p = rng.permutation(weights / weights.sum())
        self.tasks_per_topic = 4  # a task's experiences sit on a few topics
        self.n_tasks = self.n_topics * self.tasks_per_topic

    def items(self, lo: int, hi: int) -> tuple[np.ndarray, list[str], list[str], list[list[str]]]:
        rng = self.rng
        m = hi - lo
        topic = rng.choice(self.n_topics, size=m, p=self.topic_p)
        noise = rng.standard_normal((m, DIM)).astype(np.float32) / np.sqrt(DIM)
        vecs = _unit(self.topics[topic] + noise)  # cosine to topic ~0.7
        task = topic * self.tasks_per_topic + rng.integers(0, self.tasks_per_topic, size=m)
        extra = rng.random(m) < 0.15  # merged provenance: a second, unrelated task
        other = rng.integers(0, self.n_tasks, size=m)
        tasks = [
            [f"task{t}", f"task{o}"] if e else [f"task{t}"]
            for t, o, e in zip(task.tolist(), other.tolist(), extra.tolist(), strict=True)
        ]
        domains = [DOMAINS[d] for d in self.topic_domain[topic].tolist()]
        ids = [f"item{i:09d}" for i in range(lo, hi)]
        return vecs, ids, domains, tasks

    def queries(self, index: PartitionIndex, tasks_of: list[list[str]], domains_of: list[str],
                count: int) -> list[tuple[np.ndarray, str, set[str]]]:
        rng = np.random.default_rng(12345)
        out = []
        for row in rng.integers(0, self.n, size=count).tolist():
            base = index.matrix[row]
            q = base + 0.8 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
            out.append((q / np.linalg.norm(q), domains_of[row], set(tasks_of[row])))
        return out


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p))


def ann_pass(index: PartitionIndex, queries: list, truths: list, tasks_of: list[list[str]],
             domains_of: list[str]) -> dict[str, float]:
    """Time the index on every query; recall@k against the exact filtered answers."""
    index.stats = dict.fromkeys(index.stats, 0)
    ms, hits, wanted = [], 0, 0
    for (q, dom, ex), truth in zip(queries, truths, strict=True):
        t = time.perf_counter()
        got = index.search(q, len(truth) or 5, exclude_task_ids=ex, domain=dom)
        ms.append((time.perf_counter() - t) * 1e3)
        for row, _ in got:
            assert domains_of[row] == dom and not ex.intersection(tasks_of[row]), "filter leak"
        hits += len({r for r, _ in truth} & {r for r, _ in got})
        wanted += len(truth)
    return {"ann_p50": pct(ms, 50), "ann_p99": pct(ms, 99), "recall": hits / max(wanted, 1),
            **index.stats}


def bench_size(n: int, args: argparse.Namespace) -> dict[str, float]:
    say(f"\n=== {n:,} items ===")
    synth = Synth(n)
    chunks = []
    t0 = time.perf_counter()
    step = 50_000
    for lo in range(0, n, step):
        chunks.append(synth.items(lo, min(lo + step, n)))
        say(f"\r  generating rows: {min(lo + step, n):,}/{n:,} ({time.perf_counter() - t0:.1f} s)",
            end="")
    vecs = np.concatenate([c[0] for c in chunks])
    ids = [x for c in chunks for x in c[1]]
    domains_of = [x for c in chunks for x in c[2]]
    tasks_of = [x for c in chunks for x in c[3]]
    del chunks
    rss0 = rss_mb()
    t0 = time.perf_counter()
    index = PartitionIndex(ann_threshold=args.threshold, nprobe=args.nprobe)
    index.add_many(vecs, ids, domains_of, tasks_of)
    insert_s = time.perf_counter() - t0
    rss_exact = rss_mb() - rss0
    del vecs, ids
    say(f"\n  inserted in {insert_s:.1f} s; exact store (vectors + filter metadata) "
        f"RSS +{rss_exact:.0f} MB")

    def progress(stage: str, done: int, total: int) -> None:
        say(f"\r  ANN {stage}: {done:,}/{total:,} rows ({time.perf_counter() - t1:.1f} s)", end="")

    rss1 = rss_mb()
    t1 = time.perf_counter()
    index.build(progress)
    build_s = time.perf_counter() - t1
    rss_ann = rss_mb() - rss1
    if index.uses_ann:
        lists = ", ".join(f"{d} {n:,} rows/{nl} lists/nprobe {default_nprobe(nl)}"
                          for d, (n, nl) in index.ann_lists().items())
        say(f"\n  ANN indexes (one per domain) built in {build_s:.1f} s: {lists}; "
            f"ANN RSS +{rss_ann:.0f} MB")
    else:
        say("  (below the ANN threshold or faiss missing: exact search only)")

    queries = synth.queries(index, tasks_of, domains_of, args.queries)
    k = args.k
    # two separate passes: an exact scan streams the whole matrix through the caches
    truths, exact_ms = [], []
    for i, (q, dom, ex) in enumerate(queries):
        t = time.perf_counter()
        truths.append(index.search(q, k, exclude_task_ids=ex, domain=dom, exact=True))
        exact_ms.append((time.perf_counter() - t) * 1e3)
        if (i + 1) % 100 == 0:
            say(f"\r  exact queries: {i + 1}/{len(queries)}", end="")
    say("")
    main_row = None
    for nprobe in [args.nprobe, *[p for p in args.sweep if p != args.nprobe]]:
        index.nprobe = nprobe
        row = ann_pass(index, queries, truths, tasks_of, domains_of)
        label = "per-domain default" if nprobe is None else nprobe
        say(f"  index (nprobe {label}): p50 {row['ann_p50']:.3f} ms  p99 {row['ann_p99']:.3f} ms"
            f"  recall@{k} {row['recall']:.4f}  re-probed {row['reprobe']}, answered exactly "
            f"{row['exact_fallback']} of {row['ann']}")
        main_row = main_row or row
    index.nprobe = args.nprobe

    # near-neighbour exclusion actually bites: share of unfiltered top-k that the filter drops
    dropped = 0
    for q, dom, ex in queries[:100]:
        top = index.search(q, k, exact=True)
        dropped += sum(1 for r, _ in top if domains_of[r] != dom or ex.intersection(tasks_of[r]))

    batch_ms = []  # five batches of 1,000 inserts, each followed by one filtered query
    for b in range(5):
        vecs, ids, domains, tasks = synth.items(n + 1000 * b, n + 1000 * (b + 1))
        q, dom, ex = queries[b]
        t = time.perf_counter()
        index.add_many(vecs, ids, domains, tasks)
        index.search(q, k, exclude_task_ids=ex, domain=dom)
        batch_ms.append((time.perf_counter() - t) * 1e3)

    res = {
        "n": n, "insert_s": insert_s, "rss_exact_mb": rss_exact, "build_s": build_s,
        "rss_ann_mb": rss_ann, "exact_p50": pct(exact_ms, 50), "exact_p99": pct(exact_ms, 99),
        **main_row, "dropped": dropped / (100 * k), "batch_ms": float(np.median(batch_ms)),
        "batch_max_ms": max(batch_ms),
    }
    say(f"  exact: p50 {res['exact_p50']:.2f} ms  p99 {res['exact_p99']:.2f} ms; "
        f"filters drop {res['dropped']:.0%} of the unfiltered top-{k}")
    say(f"  +1,000-row batch then one query: median {res['batch_ms']:.0f} ms, "
        f"max {res['batch_max_ms']:.0f} ms (of 5)")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000",
                    help="comma-separated bank sizes (default: 10000,100000,1000000)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--nprobe", type=int, default=None,
                    help="IVF lists probed (default: each domain index's, 32 or all)")
    ap.add_argument("--sweep", default="", help="more nprobe values to time, e.g. 4,16,32")
    ap.add_argument("--threshold", type=int, default=1,
                    help="ANN threshold for the index (default 1: always the ANN path, to "
                         "measure it; the bank's default is 20,000)")
    ap.add_argument("--threads", type=int, default=None, help="faiss OpenMP threads")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.sweep = [int(p) for p in args.sweep.split(",") if p.strip()]
    if not faiss_available():
        say("faiss is not installed: only exact search will be measured")
    elif args.threads:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    say(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')} cpus={os.cpu_count()}")
    rows = [bench_size(n, args) for n in sizes]
    say(f"\n{'items':>10} {'build s':>8} {'ANN MB':>7} {'exact MB':>8} {'exact p50':>9} "
        f"{'exact p99':>9} {'ANN p50':>8} {'ANN p99':>8} {'recall':>7} {'1k add ms':>9}")
    for r in rows:
        say(f"{r['n']:>10,} {r['build_s']:>8.1f} {r['rss_ann_mb']:>7.0f} {r['rss_exact_mb']:>8.0f} "
            f"{r['exact_p50']:>9.2f} {r['exact_p99']:>9.2f} {r['ann_p50']:>8.3f} "
            f"{r['ann_p99']:>8.3f} {r['recall']:>7.4f} {r['batch_ms']:>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
