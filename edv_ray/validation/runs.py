"""Running a planted world through the whole framework (``edv run``'s own pipeline: the
simulated engine started as a supervised server, Ray workers, Parquet), reusing a run
folder the suite already finished for exactly the same config."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from rich.console import Console

from edv_ray.validation.worlds import World

MARK = "validation.json"  # written by the suite beside a finished run: the config's digest


def digest(world: World) -> str:
    return hashlib.sha1(json.dumps(world.config, sort_keys=True).encode()).hexdigest()[:16]


def run_dir_of(world: World) -> Path:
    return Path(world.config["output_dir"]) / world.run_id


def run_world(world: World, reuse: bool = True, console: Console | None = None) -> Path:
    """The world's run folder, run now unless ``reuse`` and a finished run of the same
    config is there. A stale or unfinished folder of the suite is replaced. Raises when
    the run ends incomplete (errors or unfinished steps are findings, not data)."""
    from edv_ray import pipeline

    run_dir = run_dir_of(world)
    mark = run_dir / MARK
    if reuse and mark.is_file() and json.loads(mark.read_text()).get("digest") == digest(world):
        return run_dir
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg, run_id, run_dir = pipeline.prepare_from(world.run_config())
    result = pipeline.execute(cfg, run_id, run_dir, console=console or Console(quiet=True),
                              show_progress=False)
    if not result.complete:
        raise RuntimeError(f"validation world {world.name}: the run did not complete "
                           f"({result.errors} errored episodes; unfinished: {result.unfinished[:5]})"
                           f" — see {run_dir}")
    mark.write_text(json.dumps({"digest": digest(world), "world": world.name, "size": world.size}))
    return run_dir
