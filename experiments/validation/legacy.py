"""The validation checks against an old commit (issue 21: every issue-18 defect a planted
world can show fails a check on 2c5e7a9).

    python experiments/validation/legacy.py --commit 2c5e7a9 --out /tmp/legacy [--worlds epochs homogeneous main]

For each world: the commit is unpacked (``git archive``) under OUT/src; the simulated
engine — new code — is served from THIS tree as a standalone OpenAI-compatible server; the
old framework runs the world (translated to its config schema; ``engine: endpoint``) from
its own tree; its own views are dumped; the checks of the suite are applied to the dump
(:mod:`edv_ray.validation.legacy`). Prints the same table as run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unpack(commit: str, dest: Path) -> Path:
    if not (dest / "edv_ray").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def serve_engine(world, out: Path) -> tuple[subprocess.Popen, str]:
    """The planted world's engine from this tree, on a free loopback port."""
    port = free_port()
    spec = out / f"{world.name}.spec.json"
    spec.write_text(json.dumps({"served_name": "sim", "profile": world.profile,
                                "benchmarks": [world.config["benchmark"]]}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "edv_ray.simulation.server", "--spec",
                             str(spec), "--port", str(port)], env=env,
                            stdout=open(out / f"{world.name}.engine.log", "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/models", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the simulated engine did not start (see {out / world.name}.engine.log)")


def run_old(src: Path, world, url: str, out: Path) -> Path:
    from edv_ray.validation.legacy import old_config

    cfg = old_config(world.config, url)
    cfg["output_dir"] = str(out / "runs")
    path = out / f"{world.name}.old.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run_dir = out / "runs" / cfg["run_id"]
    if not (run_dir / "DONE").exists():
        env = dict(os.environ, PYTHONPATH=str(src), RAY_AUTH_MODE="disabled", WANDB_MODE="disabled",
                   OPENAI_API_KEY="sk-simulated", LOGURU_LEVEL="WARNING")
        with open(out / f"{world.name}.old.log", "w") as log:
            rc = subprocess.run([sys.executable, "-m", "edv_ray.cli", "run", str(path)], env=env,
                                cwd=str(src), stdout=log, stderr=subprocess.STDOUT).returncode
        if rc not in (0, 4):
            raise RuntimeError(f"the old run failed (exit {rc}; see {out / world.name}.old.log)")
        (run_dir / "DONE").write_text(str(rc))
    return run_dir


def dump_old(src: Path, run_dir: Path, dest: Path) -> Path:
    from edv_ray.validation.legacy import DUMP, VIEWS

    env = dict(os.environ, PYTHONPATH=str(src))  # cwd = the old tree: `-c` puts cwd first
    subprocess.run([sys.executable, "-c", DUMP, str(run_dir), str(dest), ",".join(VIEWS)],
                   env=env, cwd=str(src), check=True)
    return dest


def checks(world, run, size: str) -> list:
    from edv_ray.validation import check_main as M
    from edv_ray.validation import check_pools as P
    from edv_ray.validation.suite import MC_REPS, expect_for

    ex = expect_for(world)
    if world.name == "epochs":
        return P.epoch_rows(run, ex, world.config, MC_REPS[size])
    if world.name == "homogeneous":
        return P.seed_rows(run, ex)
    if world.name == "main":
        run.old_contamination_share(world.config["contamination"][0])
        return M.contamination_rows(run, ex, world.config)
    raise ValueError(world.name)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from edv_ray.validation.legacy import LegacyRun
    from edv_ray.validation.suite import markdown, print_table
    from edv_ray.validation.worlds import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", default="2c5e7a9")
    ap.add_argument("--out", default="/tmp/edv-legacy")
    ap.add_argument("--size", default="fast", choices=["fast", "full"])
    ap.add_argument("--worlds", nargs="+", default=["epochs", "homogeneous", "main"])
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    src = unpack(args.commit, out / "src")
    console = Console()
    rows = []
    for name in args.worlds:
        world = load_world(name, args.size, out / "runs")
        console.print(f"[bold]{name}[/]: old framework {args.commit} on the planted world …")
        engine, url = serve_engine(world, out)
        try:
            run_dir = run_old(src, world, url, out)
        finally:
            engine.terminate()
        run = LegacyRun(dump_old(src, run_dir, out / "dump" / name), run_dir)
        rows += checks(world, run, args.size)
    print_table(rows, console)
    (out / f"legacy-{args.commit}.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
