"""Where each table's files live in a run folder, and writing them atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA


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
