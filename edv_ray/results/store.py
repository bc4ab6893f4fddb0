"""Where each table's files live in a run folder, and writing them atomically."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from edv_ray.results.parquet_io import read_conformed, write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA


def task_file(task_id: str, domain: str) -> str:
    """A filename-safe, unique file name for one task's rows in a per-task stage table."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", task_id).strip("_")[:32]
    digest = hashlib.sha1(f"{domain}\x1f{task_id}".encode()).hexdigest()[:10]
    return f"{domain}-{slug}-{digest}.parquet"


BATCH_PREFIX = "batch-"  # a file of several episodes' (or stage jobs') rows: group commit


class RunStore:
    """A run folder's tables. Episode rows and call rows go through the process's group
    commit (:func:`committer`): a write returns once the rows are on disk, in a file of
    their own (``<episode>.a<attempt>.parquet``) when written alone, else in a
    ``batch-<time>-<hex>.parquet`` with the rows of the episodes and jobs that ended with them."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def episode_path(self, stage: str, episode_id: str, attempt: int) -> Path:
        return self.run_dir / "episodes" / f"stage={stage}" / f"{episode_id}.a{attempt}.parquet"

    def calls_path(self, stage: str, episode_id: str, attempt: int) -> Path:
        return self.run_dir / "llm_calls" / f"stage={stage}" / f"{episode_id}.a{attempt}.parquet"

    def work(self, slots=None):
        """Count an episode or stage job as running in this process (see
        ``results.group_commit``): its writes may then wait for others' to join them.
        ``slots``: the process's run slots (a ``threading.Semaphore``), one held meanwhile
        (an episode may give it back at its last write)."""
        return committer().work(slots)

    def write_episode(self, stage: str, row: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """Calls first, then the episode row: an episode file means its calls are there.
        Both carry the attempt and a fresh ``attempt_id``: a call row whose attempt has no
        episode row (lost with a damaged segment) is an orphan the views leave out."""
        import uuid

        row = {**row, "attempt_id": row.get("attempt_id") or uuid.uuid4().hex}
        call_rows = [{**{k: c.get(k) for k in CALL_SCHEMA.names},
                      "attempt": row["attempt"], "attempt_id": row["attempt_id"]} for c in calls]
        # an episode's last write: its run slot may go to the next episode meanwhile
        committer().submit((self.run_dir, ("episode", stage, row, call_rows)), last=True)

    def write_calls(self, stage: str, rows: list[dict[str, Any]], name: str) -> None:
        """A stage job's call rows (``name``: its file's name when written alone)."""
        committer().submit((self.run_dir, ("calls", stage, rows, name)))

    def write_pool(self, rows: list[dict[str, Any]]) -> None:
        write_rows_atomic(rows, self.run_dir / "pool" / "agents.parquet", POOL_SCHEMA)

    def write_batch(self, items: list[tuple]) -> None:
        """One group commit's items: per stage one call file, then one episode file (a lone
        item keeps its own file name)."""
        import secrets

        if len(items) == 1:
            kind, stage, rows, extra = items[0]
            if kind == "episode":
                eid, attempt = rows["episode_id"], rows["attempt"]
                write_rows_atomic(extra, self.calls_path(stage, eid, attempt), CALL_SCHEMA,
                                  small=True)
                write_rows_atomic([rows], self.episode_path(stage, eid, attempt),
                                  EPISODE_SCHEMA, small=True)
            else:
                write_rows_atomic(rows, self.run_dir / "llm_calls" / f"stage={stage}" / extra,
                                  CALL_SCHEMA)
            return
        # named in write order (then a random part): compaction merges files by name, so a
        # segment keeps the episodes in the order they ended — the order the judging jobs
        # read them in, which a lookup's cache of decoded row groups relies on
        name = f"{BATCH_PREFIX}{time.time_ns():020d}-{secrets.token_hex(4)}.parquet"
        calls: dict[str, list] = {}
        episodes: dict[str, list] = {}
        for kind, stage, rows, extra in items:
            if kind == "episode":
                calls.setdefault(stage, []).extend(extra)
                episodes.setdefault(stage, []).append(rows)
            else:
                calls.setdefault(stage, []).extend(rows)
        for stage, rows in calls.items():
            write_rows_atomic(rows, self.run_dir / "llm_calls" / f"stage={stage}" / name,
                              CALL_SCHEMA)
        for stage, rows in episodes.items():
            write_rows_atomic(rows, self.run_dir / "episodes" / f"stage={stage}" / name,
                              EPISODE_SCHEMA, small=True)


_committer: Any = None
_committer_lock = threading.Lock()


def _write_items(items: list[tuple[Path, tuple]]) -> None:
    """One group commit's ``(run folder, item)`` pairs, each folder's items in one batch."""
    by_dir: dict[Path, list[tuple]] = {}
    for run_dir, item in items:
        by_dir.setdefault(run_dir, []).append(item)
    for run_dir, part in by_dir.items():
        RunStore(run_dir).write_batch(part)


def committer():
    """This process's group commit (``results.group_commit``): one per process, whatever
    the run folder, so that it counts every episode and job the process runs."""
    global _committer
    from edv_ray.results.group_commit import GroupCommit

    with _committer_lock:
        if _committer is None:
            _committer = GroupCommit(_write_items)
        return _committer


COMPACTED = "compacted.parquet"  # the single merged file of earlier versions (still read)
SEGMENT_PREFIX = "compacted"  # segments: compacted-00001.parquet, compacted-00002.parquet, ...
COMPACT_CHUNK_FILES = 1000  # files read at a time: memory stays bounded at any stage size
# rows per row group of an episode segment: the judging roles read one episode at a time
# (``results.episode_lookup``), a whole row group per read; DuckDB scans are unaffected
EPISODE_ROW_GROUP = 128
# held (in this process) while a segment appears and its inputs disappear, so that readers
# in the driver (live tracking) never see a row twice or a file vanish under a query
COMPACTION_LOCK = threading.Lock()


def segments(folder: Path) -> list[Path]:
    """The merged files of one table/stage folder, oldest first."""
    return sorted(folder.glob(f"{SEGMENT_PREFIX}*.parquet"))


def numbered_segments(folder: Path, legacy: bool = True) -> list[Path]:
    """The folder's numbered segments (``compacted-00001`` …, numbered from 1 without
    gaps) and, with ``legacy``, the single merged file of earlier versions if there is
    one — found with a few ``stat`` calls: a lookup never lists a folder that may hold
    thousands of files."""
    out = []
    while (p := folder / f"{SEGMENT_PREFIX}-{len(out) + 1:05d}.parquet").is_file():
        out.append(p)
    return out + [p] if legacy and (p := folder / COMPACTED).is_file() else out


def loose_files(folder: Path) -> list[Path]:
    """A table folder's files not merged into a segment yet (per episode, per job or per
    task), by name (comparing Path objects cost ~1.5 s a stage at 10⁴ episodes)."""
    return sorted((p for p in folder.glob("*.parquet")
                   if not p.name.startswith((SEGMENT_PREFIX, "."))), key=lambda p: p.name)


def _recover(folder: Path) -> None:
    """Finish or undo a compaction that crashed: a ``.inputs`` list next to its segment
    names files the segment already holds (delete them); without its segment, the
    compaction never happened (the inputs stay)."""
    for listing in folder.glob(f".{SEGMENT_PREFIX}-*.inputs"):
        segment = folder / listing.name[1:].removesuffix(".inputs")
        if segment.is_file():
            for name in listing.read_text().split("\n"):
                if name:
                    (folder / name).unlink(missing_ok=True)
        listing.unlink(missing_ok=True)


def publish_segment(segment: Path, files: list[Path], write: Callable[[Path], None]) -> None:
    """Put a merge of ``files`` in place as ``segment`` (``write`` fills a temp file), then
    delete them — crash-safe: the list of inputs is written first and removed last (see
    :func:`_recover`), so no row is lost or kept twice."""
    from edv_ray.results.parquet_io import _create_temp, write_text_atomic

    listing = segment.parent / f".{segment.name}.inputs"
    write_text_atomic(listing, "\n".join(p.name for p in files))
    tmp = _create_temp(segment)
    try:
        write(tmp)
        with COMPACTION_LOCK:
            os.replace(tmp, segment)
            for p in files:
                p.unlink(missing_ok=True)
        listing.unlink(missing_ok=True)
    finally:
        Path(tmp).unlink(missing_ok=True)
        if not segment.is_file():
            listing.unlink(missing_ok=True)


class SegmentMemo:
    """Per-process memo of what is derived from a segment (an index of its rows), keyed
    by the file's identity — path, inode, size, mtime — since segments never change once
    in place; the least recently used entries go past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.lock, self.items = limit, threading.Lock(), OrderedDict()

    def get(self, path: Path, build: Callable[..., Any], *part: Any) -> Any:
        """``build(path, *part)``, memoised per file identity and ``part`` (e.g. a row
        group's number)."""
        st = path.stat()
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, *part)
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = build(path, *part)
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.limit:
                self.items.popitem(last=False)
        return value


Merge = Callable[..., Any]  # merge(function, *args): where a merge runs (here by default)


def merge_here(fn: Callable, *args: Any) -> Any:
    return fn(*args)


def merge_episode_files(paths: list[str], table: str, tmp: str) -> int:
    """Write the rows of one stage's per-episode files (``table``: episodes / llm_calls)
    into the segment file ``tmp``, ``COMPACT_CHUNK_FILES`` files at a time with the
    table's schema (compaction's memory stays bounded). Returns the rows written. Plain
    paths in, nothing shared: it may run in another process (``compact_stage``'s
    ``merge``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = {"episodes": EPISODE_SCHEMA, "llm_calls": CALL_SCHEMA}[table]
    rows = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        for lo in range(0, len(paths), COMPACT_CHUNK_FILES):
            chunk = pa.concat_tables([read_conformed(p, schema)
                                      for p in paths[lo : lo + COMPACT_CHUNK_FILES]])
            writer.write_table(chunk, row_group_size=EPISODE_ROW_GROUP
                               if table == "episodes" else None)
            rows += chunk.num_rows
    return rows


def compact_stage(run_dir: str | Path, stage: str,
                  tables: tuple[str, ...] = ("episodes", "llm_calls"),
                  min_files: int = 1, merge: Merge = merge_here) -> dict[str, int]:
    """Merge the per-episode files of a stage (at least ``min_files`` of them) into one new
    segment per table (``<table>/stage=<stage>/compacted-NNNNN.parquet``), then delete the
    merged files. Safe while the stage is still running: workers write atomically, so every
    listed file is complete, and files written meanwhile wait for the next compaction.

    DuckDB over 10⁵ one-row files spends its time (and, with ``union_by_name``, >16 GB of
    memory: it was OOM-killed here) opening files; a few segments read in a fraction of it.
    The reading and writing (:func:`merge_episode_files`) runs through ``merge`` — here, or
    in another process (``runtime.compaction.off_driver``: reading every row is the
    driver's largest per-episode cost); listing the inputs and putting the segment in their
    place (:func:`publish_segment`, under ``COMPACTION_LOCK``) stay in this process. Resume
    semantics are unchanged: the rows (every attempt, error rows included) are the same,
    read through the same views. Crash safety: the list of inputs is written before the
    segment appears and removed after the inputs are gone (see :func:`_recover`), so no row
    is lost or kept twice. Returns the number of rows merged per table."""
    counts: dict[str, int] = {}
    for table in tables:
        folder = Path(run_dir) / table / f"stage={stage}"
        if not folder.is_dir():
            continue
        _recover(folder)
        files = loose_files(folder)
        if not files or len(files) < min_files:
            continue
        numbers = [int(n) for p in segments(folder)
                   if (n := p.stem.rsplit("-", 1)[-1]).isdigit()]  # (not the legacy name)
        segment = folder / f"{SEGMENT_PREFIX}-{max(numbers, default=0) + 1:05d}.parquet"
        rows = [0]

        def write(tmp: Path, table: str = table, files: list[Path] = files) -> None:
            rows[0] = merge(merge_episode_files, [str(p) for p in files], table, str(tmp))

        publish_segment(segment, files, write)
        counts[table] = rows[0]
    return counts
