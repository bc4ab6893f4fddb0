"""Where each table's files live in a run folder, and writing them atomically."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA


def task_file(task_id: str, domain: str) -> str:
    """A filename-safe, unique file name for one task's rows in a per-task stage table."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", task_id).strip("_")[:32]
    digest = hashlib.sha1(f"{domain}\x1f{task_id}".encode()).hexdigest()[:10]
    return f"{domain}-{slug}-{digest}.parquet"


class RunStore:
    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def episode_path(self, stage: str, episode_id: str, attempt: int) -> Path:
        return self.run_dir / "episodes" / f"stage={stage}" / f"{episode_id}.a{attempt}.parquet"

    def calls_path(self, stage: str, episode_id: str, attempt: int) -> Path:
        return self.run_dir / "llm_calls" / f"stage={stage}" / f"{episode_id}.a{attempt}.parquet"

    def write_episode(self, stage: str, row: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """Calls first, then the episode row: an episode file means its calls are there."""
        eid, attempt = row["episode_id"], row["attempt"]
        call_rows = [{k: c.get(k) for k in CALL_SCHEMA.names} for c in calls]
        write_rows_atomic(call_rows, self.calls_path(stage, eid, attempt), CALL_SCHEMA)
        write_rows_atomic([row], self.episode_path(stage, eid, attempt), EPISODE_SCHEMA)

    def write_pool(self, rows: list[dict[str, Any]]) -> None:
        write_rows_atomic(rows, self.run_dir / "pool" / "agents.parquet", POOL_SCHEMA)


COMPACTED = "compacted.parquet"


def compact_stage(run_dir: str | Path, stage: str,
                  tables: tuple[str, ...] = ("episodes", "llm_calls")) -> dict[str, int]:
    """Merge the per-episode files of a *finished* stage into one file per table
    (``<table>/stage=<stage>/compacted.parquet``), then delete the merged files.

    DuckDB over 10⁵ one-row files spends its time opening files; one file per stage
    reads in a fraction of it. Resume semantics are unchanged: the rows (every attempt,
    error rows included) are the same, read through the same views. The merged file is
    written atomically before any input is removed; re-running merges a previous
    ``compacted.parquet`` again and drops exact duplicate rows, so a crash between the
    write and the deletions only leaves duplicates the next compaction removes (and the
    ``episodes`` view, latest attempt per episode, never shows them). Returns the number
    of rows per table."""
    import duckdb

    from edv_ray.results.parquet_io import write_table_atomic
    from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA

    schemas = {"episodes": EPISODE_SCHEMA, "llm_calls": CALL_SCHEMA}
    counts: dict[str, int] = {}
    for table in tables:
        folder = Path(run_dir) / table / f"stage={stage}"
        files = sorted(str(p) for p in folder.glob("*.parquet"))
        if not files or files == [str(folder / COMPACTED)]:
            continue
        con = duckdb.connect()
        merged = con.sql(
            "SELECT DISTINCT * FROM read_parquet($files, hive_partitioning=false, "
            "union_by_name=true)", params={"files": files}).to_arrow_table()
        schema = schemas.get(table)
        if schema is not None:
            merged = merged.select(schema.names).cast(schema)
        write_table_atomic(merged, folder / COMPACTED)
        for f in files:
            if Path(f).name != COMPACTED:
                Path(f).unlink(missing_ok=True)
        counts[table] = merged.num_rows
    return counts
