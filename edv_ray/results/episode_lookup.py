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

Compaction may run meanwhile: a segment appears before the files it holds vanish, so a
lookup whose segment listing is the same before and after its probes saw every row; one
whose listing changed, or whose file vanished under it, looks again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from edv_ray.results.store import numbered_segments

INDEXED_SEGMENTS = 256  # segment indexes kept per process (~2,000 ids each)
LOOKUP_TRIES = 5

_lock = threading.Lock()
_indexes: OrderedDict[tuple, dict[str, tuple[int, int, int]]] = OrderedDict()


def _segment_index(path: Path) -> dict[str, tuple[int, int, int]]:
    """episode_id → (latest attempt, row group, row within it) of one segment, cached by
    the file's identity (a different file at the same path gets its own index)."""
    import pyarrow.parquet as pq

    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _indexes.get(key)
        if hit is not None:
            _indexes.move_to_end(key)
            return hit
    index: dict[str, tuple[int, int, int]] = {}
    pf = pq.ParquetFile(path)
    for rg in range(pf.num_row_groups):
        cols = pf.read_row_group(rg, columns=["episode_id", "attempt"]).to_pydict()
        for i, (eid, attempt) in enumerate(zip(cols["episode_id"], cols["attempt"])):
            if eid not in index or attempt > index[eid][0]:
                index[eid] = (attempt, rg, i)
    with _lock:
        _indexes[key] = index
        while len(_indexes) > INDEXED_SEGMENTS:
            _indexes.popitem(last=False)
    return index


def _read_segment_row(path: Path, row_group: int, row: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read_row_group(row_group).slice(row, 1).to_pylist()[0]


def _read_file(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read().to_pylist()  # (read_table's dataset layer costs more)


def find_episode(folder: Path, episode_id: str) -> dict[str, Any] | None:
    """The latest attempt of ``episode_id`` in one stage folder, or None."""
    for _ in range(LOOKUP_TRIES):
        names = numbered_segments(folder)
        try:
            best: tuple[int, Path, int, int] | None = None
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
