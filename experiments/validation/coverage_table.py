"""Print the coverage table of issue 27 item 5 (hard designs), with progress on stderr:
``python experiments/validation/coverage_table.py`` (10,000 repetitions per row, ~75 s), then
how many cells and paired intervals got each verdict."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from edv_ray.validation.coverage_designs import grid, table_md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=10_000, help="repetitions per cell")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.time()

    def progress(i, total, r):
        print(f"[{i}/{total} {time.time() - start:.0f}s] {r.design.name} μ={r.mu} κ={r.kappa:g}: "
              f"cell {r.cell:.3f}, paired {r.diff if r.diff is None else round(r.diff, 3)} "
              f"({r.shown} shown)", file=sys.stderr, flush=True)

    rows = grid(args.reps, args.seed, progress=progress)
    print(f"{args.reps} repetitions per row, seed {args.seed}\n")
    print(table_md(rows))
    for what, verdicts in (("cells", [r.verdict() for r in rows]),
                           ("paired", [r.diff_verdict() for r in rows])):
        print(f"\n{what}: " + ", ".join(f"{n} {v}" for v, n in Counter(verdicts).most_common()))


if __name__ == "__main__":
    main()
