"""Damaged Parquet files in a run folder: found, named, and (for episodes) set aside.

A file can be cut short by a full disk or a copy that died (our own writes are atomic,
so a crash never leaves one). DuckDB then fails on every query of the run. ``--resume``
moves damaged episode / call files aside (``NAME.damaged``), so their episodes run
again as a new attempt; any other damaged file is one clear error naming it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

RERUNNABLE = ("episodes", "llm_calls")  # tables whose files resume can re-create


def find_damaged(run_dir: str | Path) -> list[Path]:
    bad = []
    for f in sorted(Path(run_dir).rglob("*.parquet")):
        if f.name.startswith("."):
            continue
        try:
            pq.read_metadata(f)
        except Exception:  # noqa: BLE001 - any unreadable footer is damage
            bad.append(f)
    return bad


def set_aside(run_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(moved aside, left in place): episode / call files move to ``*.damaged``."""
    run_dir = Path(run_dir)
    moved, other = [], []
    for f in find_damaged(run_dir):
        if f.relative_to(run_dir).parts[0] in RERUNNABLE:
            f.rename(f.with_name(f.name + ".damaged"))
            moved.append(f)
        else:
            other.append(f)
    return moved, other
