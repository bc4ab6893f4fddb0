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
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.results.parquet_io import read_conformed
from edv_ray.results.store import (SEGMENT_PREFIX, Merge, SegmentMemo, _recover, loose_files,
                                   merge_here, numbered_segments, publish_segment)

META_KEY = b"edv_ray.task_files"
ROW_GROUP = 128  # rows per row group: a lookup reads one or two of them
CACHED_SEGMENTS = 64

_spans = SegmentMemo(CACHED_SEGMENTS)


def segment_paths(folder: Path) -> list[Path]:
    """The folder's segments, oldest first."""
    return numbered_segments(folder, legacy=False)


def compact_task_folder(folder: Path, schema: pa.Schema, merge: Merge = merge_here) -> int:
    """Merge the folder's per-task files into its next segment, then delete them.
    Returns the number of files merged. ``merge``: where the reading and writing
    (:func:`merge_task_files`) runs, as in ``results.store.compact_stage``."""
    if not folder.is_dir():
        return 0
    _recover(folder)
    files = loose_files(folder)
    if not files:
        return 0
    segment = folder / f"{SEGMENT_PREFIX}-{len(segment_paths(folder)) + 1:05d}.parquet"
    publish_segment(segment, files, lambda tmp: merge(
        merge_task_files, [str(p) for p in files], schema, str(tmp)))
    return len(files)


def merge_task_files(paths: list[str], schema: pa.Schema, tmp: str) -> None:
    """Write per-task files into the segment file ``tmp``, recording in its metadata where
    each file's rows are (an empty file too: its existence is a marker)."""
    parts, spans, start = [], {}, 0
    for p in paths:
        t = read_conformed(p, schema)
        spans[os.path.basename(p)] = [start, t.num_rows]
        start += t.num_rows
        parts.append(t)
    table = pa.concat_tables(parts).replace_schema_metadata(
        {META_KEY: json.dumps(spans).encode()})
    pq.write_table(table, tmp, row_group_size=ROW_GROUP)


def folder_rows(folder: Path, schema: pa.Schema) -> dict[str, list[dict[str, Any]]]:
    """Every per-task file's rows in the folder (file name → rows; an empty file → []),
    from its segments read whole and its files not merged yet — one pass over the
    folder, where :func:`task_file_rows` per task reads a file or a row group each."""
    for _ in range(3):
        try:
            return _folder_rows(folder, schema)
        except FileNotFoundError:
            continue  # a file merged into a segment while read: read again
    raise RuntimeError(f"{folder}: files kept vanishing while read")


def _folder_rows(folder: Path, schema: pa.Schema) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    if not folder.is_dir():
        return out
    for segment in segment_paths(folder):
        spans = _index(segment).spans
        rows = pq.read_table(segment).to_pylist()
        for name, (first, n) in spans.items():
            out[name] = rows[first : first + n]
    for p in loose_files(folder):  # a loose file wins, as in task_file_rows
        out[p.name] = read_conformed(p, schema).to_pylist()
    return out


class _SegmentIndex(NamedTuple):
    spans: dict[str, list[int]]  # file name → [first row, rows]
    starts: list[int]  # first row of each row group
    meta: pq.FileMetaData  # the parsed footer, reused by every read of the segment


def _build_index(segment: Path) -> _SegmentIndex:
    meta = pq.read_metadata(segment)
    spans = json.loads((meta.metadata or {}).get(META_KEY, b"{}"))
    starts, n = [], 0
    for i in range(meta.num_row_groups):
        starts.append(n)
        n += meta.row_group(i).num_rows
    return _SegmentIndex(spans, starts, meta)


def _index(segment: Path) -> _SegmentIndex:
    """A segment's spans, row-group starts and footer (kept per process)."""
    return _spans.get(segment, _build_index)


def _segment_rows(segment: Path, first: int, n: int, index: _SegmentIndex) -> list[dict[str, Any]]:
    """Rows ``first`` … ``first + n`` of a segment. The footer is the one kept in ``index``:
    its spans metadata names every task of the stage (~1 MB at 25,000 tasks), and parsing it
    again per read made a verify job's candidate read grow with the stage."""
    if n == 0:
        return []
    starts = index.starts
    groups = [i for i, s in enumerate(starts)
              if s < first + n and (i + 1 == len(starts) or starts[i + 1] > first)]
    t = pq.ParquetFile(segment, metadata=index.meta).read_row_groups(groups)
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
            index = _index(segment)
            if path.name in index.spans:
                return _segment_rows(segment, *index.spans[path.name], index)
        return None
    raise RuntimeError(f"{path}: kept vanishing while read")


def task_file_exists(path: Path) -> bool:
    """Whether a per-task file was written (it may live in a segment by now)."""
    if path.is_file():
        return True
    return any(path.name in _index(s).spans for s in segment_paths(path.parent))
