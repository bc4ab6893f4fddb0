"""Plain records of the EDV stages and their Parquet schemas (one place).

Tables under ``RUN_DIR/edv/`` (another EDV instance: ``RUN_DIR/<its name>/``;
hive-partitioned by epoch; one file per task):
  candidates/epoch=E/<task>.parquet     candidates proposed for a task (incl. poison)
  distill_runs/epoch=E/<task>.parquet   one row per task: status, attempts (the marker)
  votes/epoch=E/<task>.parquet          one row per (candidate, verifier)
  verify_runs/epoch=E/<task>.parquet    one row per task (the marker)
  decisions/epoch=E/part.parquet        where each candidate was admitted (column ``route``:
                                        shared / private / discard)
A stage's marker file is written last, atomically: present = the stage finished.
When an epoch's steps end, each per-task folder is merged into segments
(``results.task_tables``); read them through :func:`task_rows` / :func:`task_done`, which
answer the same before and after.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from edv_ray.memory.records import Experience
from edv_ray.results.store import task_file  # noqa: F401 - stage tables name files by task


MAX_TAGS = 8  # a distilled lesson's tags (the distill prompts state it)


class DistilledExperience(Experience):
    """The strict schema a distiller must answer with: one lesson (the bounds of
    :class:`~edv_ray.memory.records.Lesson`), at most :data:`MAX_TAGS` tags, the runs cited as
    evidence."""

    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)
    evidence: list[str] = Field(default_factory=list)


class DistillAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experiences: list[DistilledExperience] = Field(max_length=10)


class VoteAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    approve: bool
    rationale: str = Field(default="", max_length=2000)


class TrajectoryView(BaseModel):
    """What the EDV stages see of one episode."""

    label: str  # T1, T2, ... (stable order: by agent name)
    episode_id: str
    agent: str
    success: bool
    reward: float
    transcript: str
    # what the run did, reward-blind (a hash of its actions): two runs whose signatures
    # differ ended in different states — the contrast a distiller without grades can see
    signature: str = ""




def edv_dir(run_dir: str | Path, table: str, epoch: int, method: str = "edv") -> Path:
    """``RUN_DIR/<method>/<table>/epoch=E``: each EDV instance's tables in its own folder."""
    return Path(run_dir) / method / table / f"epoch={epoch}"


def edv_path(run_dir: str | Path, table: str, epoch: int, name: str, method: str = "edv") -> Path:
    return edv_dir(run_dir, table, epoch, method) / name


def task_rows(run_dir: str | Path, table: str, epoch: int, name: str,
              method: str = "edv") -> list[dict]:
    """One task's rows of a per-task table ([] when it has none)."""
    from edv_ray.results.task_tables import task_file_rows

    return task_file_rows(edv_path(run_dir, table, epoch, name, method)) or []


def task_done(run_dir: str | Path, table: str, epoch: int, name: str, method: str = "edv") -> bool:
    """Whether a task's file (a stage's marker) was written."""
    from edv_ray.results.task_tables import task_file_exists

    return task_file_exists(edv_path(run_dir, table, epoch, name, method))


def table_rows(run_dir: str | Path, table: str, epoch: int, method: str = "edv",
               merge: bool = False) -> dict[str, list[dict]]:
    """Every task's rows of one per-task table (task file name → rows; a marker with no
    rows → []), read in one pass — after merging its files into a segment first with
    ``merge`` (for a table no stage job reads any more this epoch), so they are read
    once, not once more when the epoch ends."""
    from edv_ray.results.task_tables import compact_task_folder, folder_rows
    from edv_ray.runtime.compaction import off_driver

    folder = edv_dir(run_dir, table, epoch, method)
    if merge:
        compact_task_folder(folder, TASK_TABLES[table], off_driver)
    return folder_rows(folder, TASK_TABLES[table])


def compact_epoch(run_dir: str | Path, epoch: int, method: str = "edv") -> dict[str, int]:
    """Merge one epoch's per-task files, table by table (files merged per table)."""
    from edv_ray.results.task_tables import compact_task_folder
    from edv_ray.runtime.compaction import off_driver

    return {table: compact_task_folder(edv_dir(run_dir, table, epoch, method), schema, off_driver)
            for table, schema in TASK_TABLES.items()}


def candidate_id(epoch: int, domain: str, task_id: str, index: int, rule: str) -> str:
    key = f"{epoch}\x1f{domain}\x1f{task_id}\x1f{index}\x1f{rule}"
    return "c-" + hashlib.sha1(key.encode()).hexdigest()[:16]


_S, _L = pa.string(), pa.list_(pa.string())

CANDIDATE_SCHEMA = pa.schema([
    ("candidate_id", _S), ("run_id", _S), ("domain", _S), ("task_id", _S),
    ("distiller", _S), ("distiller_type", _S), ("title", _S), ("when_to_use", _S),
    ("rule", _S), ("tags", _L), ("supporting_episode_ids", _L),
    ("rejected_episode_ids", _L), ("supporting_all_failed", pa.bool_()),
    ("is_poison", pa.bool_()),
])

DISTILL_RUN_SCHEMA = pa.schema([
    ("run_id", _S), ("domain", _S), ("task_id", _S), ("distiller", _S),
    ("distiller_type", _S), ("status", _S), ("attempts", pa.int32()),
    ("n_candidates", pa.int32()), ("group", _L), ("group_successes", pa.int32()),
    ("error", _S), ("sees_reward", pa.bool_()),
])

VOTE_SCHEMA = pa.schema([
    ("candidate_id", _S), ("run_id", _S), ("domain", _S), ("task_id", _S),
    ("verifier", _S), ("verifier_type", _S), ("approve", pa.bool_()),
    ("parse_ok", pa.bool_()), ("rationale", _S), ("sees_reward", pa.bool_()),
    ("context_episode_ids", _L),
    ("context_success", pa.bool_()), ("supporting_all_failed", pa.bool_()),
    ("is_poison", pa.bool_()),
])

VERIFY_RUN_SCHEMA = pa.schema([
    ("run_id", _S), ("domain", _S), ("task_id", _S), ("verifiers", _L),
    ("n_candidates", pa.int32()), ("n_votes", pa.int32()), ("status", _S),
])

DECISION_SCHEMA = pa.schema([
    ("candidate_id", _S), ("run_id", _S), ("domain", _S), ("task_id", _S),
    ("route", _S), ("approvers", _L), ("verifiers", _L), ("is_poison", pa.bool_()),
    ("supporting_all_failed", pa.bool_()), ("item_ids", _L),
])

TASK_TABLES = {"candidates": CANDIDATE_SCHEMA, "distill_runs": DISTILL_RUN_SCHEMA,
               "votes": VOTE_SCHEMA, "verify_runs": VERIFY_RUN_SCHEMA}  # one file per task
