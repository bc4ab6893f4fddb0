"""Query embeddings under concurrency: what a worker's episode threads pay to embed their
retrieval queries, one forward pass each (unbatched) or sharing passes (``embed_one``'s
micro-batching, :class:`edv_ray.memory.embeddings._Batcher`).

N threads each embed M distinct queries (the length of a Mind2Web / τ²-bench retrieval
query), as a worker's ``max_concurrency`` episode threads do. Prints queries/s of wall time
and CPU ms per query for both paths, the passes and mean batch size of the batched one, and
the largest difference between the two paths' vectors.

    .venv/bin/python experiments/bench/query_embedding.py --threads 16 --queries 40
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from edv_ray.memory import embeddings  # noqa: E402


def query(t: int, q: int) -> str:
    return (f"Task {t}-{q}: on the airline site, change the reservation for passenger "
            f"number {q} to seat {t * 3 + q} and keep the booking class; the user asks "
            f"whether the fee for bag {q % 4} is refunded.")


def run(threads: int, queries: int, one) -> tuple[float, float, dict]:
    out: dict = {}

    def work(t: int) -> None:
        for q in range(queries):
            out[(t, q)] = one(query(t, q))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return time.perf_counter() - wall0, time.process_time() - cpu0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=16, help="concurrent episode threads")
    ap.add_argument("--queries", type=int, default=40, help="queries per thread")
    args = ap.parse_args()
    emb = embeddings.Embedder()
    emb.embed(["warm up"])
    n = args.threads * args.queries
    print(f"{args.threads} threads × {args.queries} queries = {n} queries")
    wall_u, cpu_u, unbatched = run(args.threads, args.queries, lambda s: emb.embed([s])[0])
    batcher = embeddings._BATCHERS.setdefault(emb._key, embeddings._Batcher())
    passes0 = batcher.passes
    wall_b, cpu_b, batched = run(args.threads, args.queries, emb.embed_one)
    passes = batcher.passes - passes0
    diff = max(float(np.max(np.abs(batched[k] - unbatched[k]))) for k in unbatched)
    for name, wall, cpu in (("unbatched", wall_u, cpu_u), ("batched", wall_b, cpu_b)):
        print(f"  {name:9s}: {n / wall:7.1f} queries/s, {1000 * cpu / n:6.2f} CPU ms per query "
              f"({wall:.1f} s wall, {cpu:.1f} CPU s)")
    print(f"  batched: {passes} forward passes, {n / max(passes, 1):.1f} queries per pass; "
          f"largest |Δ| between the paths' vectors: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
