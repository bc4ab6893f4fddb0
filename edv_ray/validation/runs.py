"""Running a planted world through the whole framework (``edv run``'s own pipeline: the
simulated engine started as a supervised server, Ray workers, Parquet), reusing a run
folder the suite already finished for exactly the same config *and the same code*: a
finished world is keyed on its config and on :func:`code_digest` (every file of the
``edv_ray`` package that can change what a run does — its modules, prompts, templates and
data — not its READMEs, nor ``validation/`` itself, whose checks read a run and whose
worlds are digested as configs), so a changed engine, method or prompt runs the world
again and a changed check does not."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path

from rich.console import Console

from edv_ray.validation.worlds import World

INCOMPLETE = "the run did not complete"  # run_world's error (read by mutants.refused)
MARK = "validation.json"  # written by the suite beside a finished run: config + code digest
PACKAGE = Path(__file__).resolve().parent.parent  # the edv_ray package
DOCS = ("README.md", "ARCHITECTURE.md")  # change no run
CHECKS = "validation"  # the suite's own package: it reads runs (worlds: digested as configs)


@functools.lru_cache(maxsize=None)
def code_digest(root: Path = PACKAGE) -> str:
    """A digest of every file under ``root`` (paths and bytes) but bytecode, docs and the
    suite's own package."""
    h = hashlib.sha1()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc"
                or path.name in DOCS or rel.parts[0] == CHECKS):
            continue
        h.update(rel.as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def digest(world: World, code: str | None = None) -> str:
    """What a finished run of ``world`` must match to be reused: its config and the code
    (``code``: a tree's :func:`code_digest`; default this package's)."""
    key = json.dumps({"config": world.config, "code": code or code_digest()}, sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


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
        raise RuntimeError(f"validation world {world.name}: {INCOMPLETE} "
                           f"({result.errors} errored episodes; unfinished: {result.unfinished[:5]})"
                           f" — see {run_dir}")
    mark.write_text(json.dumps({"digest": digest(world), "world": world.name, "size": world.size}))
    return run_dir
