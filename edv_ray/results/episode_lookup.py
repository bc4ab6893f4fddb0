"""One stored episode by id, in time that does not grow with its stage.

A stage's episodes live in per-episode files (``<id>.a<attempt>.parquet``) until
compaction merges them into segments (``results.store.compact_stage``). The judging
roles (EDV's distiller and verifiers, RB's self-judge, the Judge) read a handful of
episodes per job, tens of thousands of jobs per run. Listing the stage folder with a
pattern and filtering every segment per lookup made each read cost O(stage size): at
25,000 training tasks the distill stage ran at ~27 groups/s and slowed as it went.

Here a lookup finds the folder's segments by name (``store.numbered_segments``), finds the id in a
per-process index of each segment (``episode_id`` → latest attempt, row group, row —
built once per segment from two columns; segments are immutable once in place), probes
the attempts after the segments' latest by name (attempt numbers are contiguous: a
resume numbers a retry ``latest on disk + 1``), and reads one row group or one file.

Episodes written together by the worker's group commit (``results.group_commit``) share
a ``batch-<time>-<hex>.parquet`` file until compaction merges it: those are indexed like segments
(they never change once written either). Finding them takes a listing of the folder's
loose files — at most a compaction's worth (``runtime.compaction.COMPACT_EVERY`` files) —,
kept per process once the folder has been still for ``QUIET_S`` (a judging stage reads a
stage that has ended: one listing per process, not one per lookup). Batch files are named
in write order, so a segment merged from them keeps episodes in the order they ended —
the order judging jobs read them, which the decoded row groups kept here rely on — and a
file's footer is parsed once per process (a 50,000-episode segment's ~400 row groups × 35
columns, parsed per read, grew each lookup with the stage).

Compaction may run meanwhile: a segment appears before the files it holds vanish, so a
lookup whose segment listing is the same before and after its probes saw every row; one
whose listing changed, or whose file vanished under it, looks again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from edv_ray.results.store import BATCH_PREFIX, SegmentMemo, numbered_segments

INDEXED_SEGMENTS = 256  # segment indexes kept per process (~2,000 ids each)
INDEXED_BATCHES = 4096  # batch-file indexes kept per process (a few dozen ids each)
QUIET_S = 1.0  # a folder unchanged this long has its listing of batch files kept
DECODED_ROW_GROUPS = 4  # row groups kept decoded per process (128 episodes each)
LOOKUP_TRIES = 5

_indexes = SegmentMemo(INDEXED_SEGMENTS)
_row_groups = SegmentMemo(DECODED_ROW_GROUPS)
_batch_indexes = SegmentMemo(INDEXED_BATCHES)
_footers = SegmentMemo(INDEXED_SEGMENTS)  # parsed footers of the files rows were read from
_listings: dict[Path, tuple[int, dict]] = {}
_listings_lock = threading.Lock()


def _build_index(path: Path) -> dict[str, tuple[int, int, int]]:
    import pyarrow.parquet as pq

    index: dict[str, tuple[int, int, int]] = {}
    pf = pq.ParquetFile(path)
    for rg in range(pf.num_row_groups):
        cols = pf.read_row_group(rg, columns=["episode_id", "attempt"]).to_pydict()
        for i, (eid, attempt) in enumerate(zip(cols["episode_id"], cols["attempt"])):
            if eid not in index or attempt > index[eid][0]:
                index[eid] = (attempt, rg, i)
    return index


def _segment_index(path: Path) -> dict[str, tuple[int, int, int]]:
    """episode_id → (latest attempt, row group, row within it) of one segment."""
    return _indexes.get(path, _build_index)


def _batch_index(paths: list[Path]) -> dict[str, tuple[int, Path, int, int]]:
    """episode_id → (latest attempt, file, row group, row) over batch files."""
    merged: dict[str, tuple[int, Path, int, int]] = {}
    for p in paths:
        for eid, (attempt, rg, row) in _batch_indexes.get(p, _build_index).items():
            if eid not in merged or attempt > merged[eid][0]:
                merged[eid] = (attempt, p, rg, row)
    return merged


def batch_index(folder: Path) -> dict[str, tuple[int, Path, int, int]]:
    """The folder's group-commit files not merged yet, indexed (:func:`_batch_index`).
    Kept per process (keyed by the folder's mtime) once the folder has not changed for
    ``QUIET_S``: file times are coarse, so what was read from a folder still being written
    is never trusted twice."""
    try:
        mtime = folder.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    with _listings_lock:
        kept = _listings.get(folder)
    if kept is not None and kept[0] == mtime:
        return kept[1]
    index = _batch_index(sorted(folder.glob(f"{BATCH_PREFIX}*.parquet"), key=lambda p: p.name))
    if time.time_ns() - mtime > QUIET_S * 1e9:
        with _listings_lock:
            _listings[folder] = (mtime, index)
    return index


def _read_metadata(path: Path):
    import pyarrow.parquet as pq

    return pq.read_metadata(path)


def _read_row_group(path: Path, row_group: int):
    """One row group, the file's footer parsed once per process (a segment of 50,000
    episodes has ~400 row groups × 35 column chunks: parsing them for every row group read
    was a per-lookup cost that grew with the stage)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path, metadata=_footers.get(path, _read_metadata)) as f:
        return f.read_row_group(row_group)


def _decoded_rows(path: Path, row_group: int) -> list[dict[str, Any]]:
    return _read_row_group(path, row_group).to_pylist()


def _read_segment_row(path: Path, row_group: int, row: int) -> dict[str, Any]:
    """One row of a segment. Its row group is decoded whole (Parquet reads no less), and
    kept as rows: a judging job reads its task's episodes, which ended together and sit in
    one row group, and the next jobs' tasks ran beside them (a distill job read ~2 row
    groups of 128 episodes for 2 rows: a fifth of a worker's CPU in the distill stage;
    then converting a one-row slice per lookup, 35 columns, a tenth of it)."""
    return dict(_row_groups.get(path, _decoded_rows, row_group)[row])


def _read_file(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read().to_pylist()  # (read_table's dataset layer costs more)


def find_episode(folder: Path, episode_id: str) -> dict[str, Any] | None:
    """The latest attempt of ``episode_id`` in one stage folder, or None."""
    for _ in range(LOOKUP_TRIES):
        names = numbered_segments(folder)
        try:
            best: tuple[int, Path, int, int] | None = batch_index(folder).get(episode_id)
            for path in names:
                hit = _segment_index(path).get(episode_id)
                if hit is not None and (best is None or hit[0] > best[0]):
                    best = (hit[0], path, hit[1], hit[2])
            attempt, loose = (best[0] if best else 0) + 1, None
            while (folder / f"{episode_id}.a{attempt}.parquet").is_file():
                loose, attempt = attempt, attempt + 1
            if numbered_segments(folder) != names:
                continue  # a compaction ran meanwhile: files may have moved
            if loose is not None:
                rows = _read_file(folder / f"{episode_id}.a{loose}.parquet")
                return max(rows, key=lambda r: r["attempt"])
            if best is not None:
                return _read_segment_row(best[1], best[2], best[3])
            return None
        except FileNotFoundError:
            continue
    raise RuntimeError(f"episode {episode_id}: {folder} kept changing under {LOOKUP_TRIES} "
                       "lookups (a compaction loop?)")
