"""Per-task stage tables: one small file per task and epoch (EDV's ``distill_runs``,
``candidates``, ``votes``, ``verify_runs``), written atomically by a stage job; a file's
existence is the job's "done" marker, which resume reads.

A construction over 25,000 training tasks left 25,000 such files per table and epoch:
every DuckDB view over them opened each one (seconds per query, gigabytes of memory).
:func:`compact_task_folder` merges a folder's files into a numbered segment
(``compacted-00001.parquet``, ``-00002``, …) whose Parquet metadata records where each
file's rows are (file name → first row, rows; empty files included), so
:func:`task_file_rows` and :func:`task_file_exists` answer the same before and after a
compaction — resume is unchanged. Segments are numbered from 1 without gaps, so finding
them costs a few ``stat`` calls, never a listing of a folder of 25,000 files.

Crash safety is ``results.store.compact_stage``'s: the list of inputs is written before
the segment appears and removed after the inputs are gone; a reader that finds a file
missing looks in the segments, which appear before the files they hold vanish.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.results.store import (SEGMENT_PREFIX, SegmentMemo, _recover, numbered_segments,
                                   publish_segment)

META_KEY = b"edv_ray.task_files"
ROW_GROUP = 128  # rows per row group: a lookup reads one or two of them
CACHED_SEGMENTS = 64

_spans = SegmentMemo(CACHED_SEGMENTS)


def segment_paths(folder: Path) -> list[Path]:
    """The folder's segments, oldest first."""
    return numbered_segments(folder, legacy=False)


def compact_task_folder(folder: Path, schema: pa.Schema) -> int:
    """Merge the folder's per-task files into its next segment, then delete them.
    Returns the number of files merged."""
    import pyarrow.dataset as ds

    if not folder.is_dir():
        return 0
    _recover(folder)
    files = sorted(p for p in folder.glob("*.parquet")
                   if not p.name.startswith((SEGMENT_PREFIX, ".")))
    if not files:
        return 0
    segment = folder / f"{SEGMENT_PREFIX}-{len(segment_paths(folder)) + 1:05d}.parquet"
    parts, spans, start = [], {}, 0
    for lo in range(0, len(files), 1000):
        chunk = files[lo : lo + 1000]
        t = ds.dataset([str(p) for p in chunk], schema=schema, format="parquet").to_table(
            columns=[*schema.names, "__filename"])
        t = t.sort_by("__filename")  # each file's rows together, in the file's order
        counts: dict[str, int] = {}
        for name in t.column("__filename").to_pylist():
            key = os.path.basename(name)
            counts[key] = counts.get(key, 0) + 1
        for p in chunk:  # every input, an empty one too: its existence is a marker
            spans[p.name] = [start, counts.get(p.name, 0)]
            start += counts.get(p.name, 0)
        parts.append(t.drop_columns(["__filename"]))
    table = pa.concat_tables(parts).replace_schema_metadata(
        {META_KEY: json.dumps(spans).encode()})
    publish_segment(segment, files,
                    lambda tmp: pq.write_table(table, str(tmp), row_group_size=ROW_GROUP))
    return len(files)


def _build_index(segment: Path) -> tuple[dict[str, list[int]], list[int]]:
    meta = pq.read_metadata(segment)
    spans = json.loads((meta.metadata or {}).get(META_KEY, b"{}"))
    starts, n = [], 0
    for i in range(meta.num_row_groups):
        starts.append(n)
        n += meta.row_group(i).num_rows
    return spans, starts


def _index(segment: Path) -> tuple[dict[str, list[int]], list[int]]:
    """(file name → [first row, rows], first row of each row group) of a segment."""
    return _spans.get(segment, _build_index)


def _segment_rows(segment: Path, first: int, n: int, starts: list[int]) -> list[dict[str, Any]]:
    if n == 0:
        return []
    groups = [i for i, s in enumerate(starts)
              if s < first + n and (i + 1 == len(starts) or starts[i + 1] > first)]
    t = pq.ParquetFile(segment).read_row_groups(groups)
    return t.slice(first - starts[groups[0]], n).to_pylist()


def task_file_rows(path: Path) -> list[dict[str, Any]] | None:
    """The rows of one per-task file — its own file, or the segment that merged it — or
    None when it was never written."""
    for _ in range(3):
        if path.is_file():
            try:
                return pq.ParquetFile(path).read().to_pylist()
            except FileNotFoundError:
                continue  # merged into a segment since the check: look there
        for segment in reversed(segment_paths(path.parent)):
            spans, starts = _index(segment)
            if path.name in spans:
                return _segment_rows(segment, *spans[path.name], starts)
        return None
    raise RuntimeError(f"{path}: kept vanishing while read")


def task_file_exists(path: Path) -> bool:
    """Whether a per-task file was written (it may live in a segment by now)."""
    if path.is_file():
        return True
    return any(path.name in _index(s)[0] for s in segment_paths(path.parent))
