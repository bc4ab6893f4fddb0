"""The mutation table (issue 27): each named quiet bug (``edv_ray/validation/mutants.py``)
applied to a copy of the tree, the fast validation suite run on that copy (only the
worlds the bug can move), and the verdict: caught by a planted-vs-measured row, caught
only by the framework's own validity table, or not caught.

    python experiments/validation/mutants.py                  # every mutant (~1 h on 2 cores)
    python experiments/validation/mutants.py --only votes_ignored ninety_percent
    python experiments/validation/mutants.py --list

Writes OUT/mutants.md and OUT/mutants.json (OUT = runs/mutants by default); a mutant's
copy, suite log and results are under OUT/<name>/. A rerun reuses a mutant's finished
worlds (run.py's reuse: same config, same mutated code). Exit code 1 when some mutant
is not caught by a planted-vs-measured row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def run_mutant(m, base: Path, out: Path, log, worlds: list[str] | None = None) -> dict:
    """Apply ``m`` to ``base`` (the tree as it was when the table started) under
    OUT/<name>/src, run the fast suite there (on ``worlds``: those of the mutant's own
    worlds that are listed, default all), read its rows."""
    from edv_ray.validation.mutants import apply, framework_own, refused

    here = out / m.name
    src = apply(m, base, here / "src")
    results = here / "out"
    env = dict(os.environ, PYTHONPATH=str(src))
    t0 = time.monotonic()
    ran = [w for w in m.worlds if not worlds or w in worlds] or list(m.worlds)
    with open(here / "suite.log", "w") as f:
        rc = subprocess.run([sys.executable, str(src / "experiments/validation/run.py"), "--fast",
                             "--only", *ran, "--out", str(results)], cwd=src, env=env,
                            stdout=f, stderr=subprocess.STDOUT).returncode
    secs = time.monotonic() - t0
    path = results / "results-fast.json"
    rows = json.loads(path.read_text()) if path.is_file() and rc in (0, 1) else []
    failed = [r["check"] for r in rows if r["ok"] is False]
    planted = [c for c in failed if not framework_own(c)]
    own = [c for c in failed if framework_own(c)]
    errs = refused((here / "suite.log").read_text(errors="replace")) if not rows else None
    if errs:  # the planted world refused the run: it errs loudly instead of passing quietly
        planted = [f"the run errs — {errs}"]
    verdict = ("caught" if planted else "validity table only" if own
               else "suite crashed" if not rows else "NOT caught")
    log(f"{m.name}: {verdict} in {secs:.0f} s" + (f" — {'; '.join(failed)}" if failed else ""))
    return dict(name=m.name, bug=m.bug, worlds=ran, verdict=verdict, rows=planted,
                validity=own, rc=rc, seconds=round(secs), log=str(here / "suite.log"))


def _short(check: str) -> str:
    """A row's number ("2f"), a world-0 row whole, a refused run as its error count."""
    if check.startswith("the run errs"):
        m = re.search(r"\((\d+) errored episodes", check)
        return f"the run errs ({m.group(1) if m else '?'} errored episodes: the engine refused them)"
    return check if check.startswith("0") else check.split(" ")[0]


def markdown(results: list[dict]) -> str:
    out = ["| mutant | bug | worlds run | verdict | rows that caught it |", "|---|---|---|---|---|"]
    for r in results:
        rows = "; ".join(_short(c) for c in r["rows"])
        if r["validity"]:
            rows += ("; " if rows else "") + "validity table"
        verdict = r["verdict"] if r["name"] != "none" else (
            "every row passes" if r["verdict"] == "NOT caught" else f"FAILS ({r['verdict']})")
        out.append(f"| `{r['name']}` | {r['bug']} | {', '.join(r['worlds'])} | {verdict} "
                   f"| {rows or '—'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from edv_ray.validation.mutants import BASELINE, BY_NAME, MUTANTS, copy_tree

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(BY_NAME), help="only these mutants")
    ap.add_argument("--out", default="runs/mutants", help="where copies and results go (%(default)s)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--worlds", nargs="+", help="run each mutant only on those of its worlds "
                    "listed here (one that lists none runs all of its own): CI's time")
    ap.add_argument("--baseline", action="store_true",
                    help="first run the unmutated tree on every fast world (it must pass)")
    args = ap.parse_args(argv)
    console = Console()
    chosen = [BY_NAME[n] for n in args.only] if args.only else list(MUTANTS)
    chosen = [BASELINE] * args.baseline + chosen
    if args.list:
        for m in chosen:
            console.print(f"{m.name:28} {', '.join(m.worlds):16} {m.bug}")
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = copy_tree(ROOT, out / "base")  # the tree's later edits reach no mutant of this table
    results = []
    for i, m in enumerate(chosen, 1):
        console.print(f"[bold][{i}/{len(chosen)}][/] {m.name} ({', '.join(m.worlds)}) …")
        results.append(run_mutant(m, base, out, console.print, args.worlds))
    (out / "mutants.md").write_text(markdown(results))
    (out / "mutants.json").write_text(json.dumps(results, indent=1))
    console.print(markdown(results))
    base = [r for r in results if r["name"] == BASELINE.name]
    bugs = [r for r in results if r["name"] != BASELINE.name]
    caught = sum(r["verdict"] == "caught" for r in bugs)
    if base:
        console.print(f"[bold]baseline: {'passes' if base[0]['verdict'] == 'NOT caught' else 'FAILS'}[/]")
    console.print(f"[bold]{caught} of {len(bugs)} caught by a planted-vs-measured row[/]; "
                  f"written: {out / 'mutants.md'}")
    return 0 if caught == len(bugs) and all(r["verdict"] == "NOT caught" for r in base) else 1


if __name__ == "__main__":
    sys.exit(main())
