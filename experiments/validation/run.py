"""The validation suite: planted worlds (engine: simulated) run through the whole framework,
what it measured set against what was planted (computed apart from it).

    python experiments/validation/run.py --fast          # the CI sizes (minutes)
    python experiments/validation/run.py --full          # the README figures (about an hour)
    python experiments/validation/run.py --full --only main null

Prints one table — check, planted value, measured value with its interval, verdict —
and writes it to OUT/results.md and OUT/results.json. Finished runs of an unchanged
world under unchanged code (config and ``edv_ray`` files digested) are reused (--no-reuse runs everything again). Exit code 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LOGURU_LEVEL", "WARNING")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from edv_ray.validation.suite import WORLDS, markdown, print_table, run_suite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group(required=True)
    size.add_argument("--fast", action="store_const", const="fast", dest="size")
    size.add_argument("--full", action="store_const", const="full", dest="size")
    ap.add_argument("--out", default="runs/validation", help="run folders and results (default %(default)s)")
    ap.add_argument("--only", nargs="+", choices=sorted(set(WORLDS["full"])), help="only these worlds")
    ap.add_argument("--no-reuse", action="store_true", help="run every world again")
    args = ap.parse_args(argv)
    console = Console()
    out = Path(args.out)
    rows = run_suite(args.size, out, reuse=not args.no_reuse, only=args.only, console=console)
    print_table(rows, console)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"results-{args.size}.md").write_text(markdown(rows))
    (out / f"results-{args.size}.json").write_text(json.dumps([asdict(r) for r in rows], indent=1,
                                                              default=str))
    console.print(f"written: {out / f'results-{args.size}.md'}")
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
