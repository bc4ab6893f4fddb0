"""Per-task stage files (EDV's markers, candidates, votes) read the same — rows, empty
files, "was it written" — before and after their folder is merged into segments, and the
DuckDB views over the folder see every row once."""

from __future__ import annotations

import duckdb

from edv_ray.methods.edv import records as R
from edv_ray.results.parquet_io import write_rows_atomic, write_text_atomic
from edv_ray.results.task_tables import (
    compact_task_folder,
    segment_paths,
    task_file_exists,
    task_file_rows,
)

COLS = ("candidate_id", "task_id", "approve")


def _votes(i: int) -> list[dict]:  # 0–3 rows per task; a task with none still has a file
    return [dict(candidate_id=f"c{i}-{k}", task_id=f"t{i}", domain="d", approve=bool(k % 2))
            for k in range(i % 4)]


def _read(path) -> list[tuple] | None:
    rows = task_file_rows(path)
    return None if rows is None else [tuple(r[c] for c in COLS) for r in rows]


def test_rows_and_markers_survive_compaction(tmp_path):
    folder = tmp_path / "edv" / "votes" / "epoch=0"
    for i in range(300):
        write_rows_atomic(_votes(i), folder / f"t{i:04d}.parquet", R.VOTE_SCHEMA)
    names = [f"t{i:04d}.parquet" for i in range(300)]
    before = {n: _read(folder / n) for n in names}
    assert before["t0000.parquet"] == [] and len(before["t0003.parquet"]) == 3
    assert compact_task_folder(folder, R.VOTE_SCHEMA) == 300
    for i in range(300, 310):  # a resumed epoch adds tasks after the merge
        write_rows_atomic(_votes(i), folder / f"t{i:04d}.parquet", R.VOTE_SCHEMA)
        names.append(f"t{i:04d}.parquet")
        before[names[-1]] = _read(folder / names[-1])
    assert compact_task_folder(folder, R.VOTE_SCHEMA) == 10
    assert compact_task_folder(folder, R.VOTE_SCHEMA) == 0  # nothing left
    assert sorted(p.name for p in folder.iterdir()) == [p.name for p in segment_paths(folder)] == [
        "compacted-00001.parquet", "compacted-00002.parquet"]
    assert {n: _read(folder / n) for n in names} == before
    assert all(task_file_exists(folder / n) for n in names)  # empty files included
    assert not task_file_exists(folder / "t9999.parquet")
    assert task_file_rows(folder / "t9999.parquet") is None
    n_rows = duckdb.connect().execute(
        f"SELECT count(*), count(DISTINCT candidate_id) FROM read_parquet('{folder}/*.parquet')"
    ).fetchone()
    assert n_rows == (sum(len(v) for v in before.values()),) * 2


def test_a_crashed_compaction_loses_nothing(tmp_path):
    folder = tmp_path / "edv" / "votes" / "epoch=0"
    for i in range(8):
        write_rows_atomic(_votes(i), folder / f"t{i}.parquet", R.VOTE_SCHEMA)
    before = {i: _read(folder / f"t{i}.parquet") for i in range(8)}
    # it crashed after listing its inputs, before its segment appeared: inputs stay
    write_text_atomic(folder / ".compacted-00001.parquet.inputs", "t0.parquet\nt1.parquet")
    assert compact_task_folder(folder, R.VOTE_SCHEMA) == 8
    assert {i: _read(folder / f"t{i}.parquet") for i in range(8)} == before
    assert sorted(p.name for p in folder.iterdir()) == ["compacted-00001.parquet"]


def test_reads_from_a_segment_reuse_its_parsed_footer(tmp_path, monkeypatch):
    """A segment's footer holds the span of every task of the stage (~1 MB at 25,000
    tasks): reading a task's rows parses it once per process, not per read (a verify job's
    candidate read grew with the stage), and the rows are still the task's own."""
    import pyarrow.parquet as pq

    folder = tmp_path / "edv" / "votes" / "epoch=0"
    for i in range(300):
        write_rows_atomic(_votes(i), folder / f"t{i:04d}.parquet", R.VOTE_SCHEMA)
    compact_task_folder(folder, R.VOTE_SCHEMA)
    assert _read(folder / "t0003.parquet") == [("c3-0", "t3", False), ("c3-1", "t3", True),
                                                ("c3-2", "t3", False)]
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(pq, "ParquetFile", lambda p, **kw: opened.append(kw.get("metadata"))
                        or real(p, **kw))
    got = {i: _read(folder / f"t{i:04d}.parquet") for i in (7, 130, 259, 299)}
    assert got == {i: [tuple(r[c] for c in COLS) for r in _votes(i)] for i in got}
    assert len(opened) == 4 and all(m is not None for m in opened)
