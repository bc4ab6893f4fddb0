"""Atomic Parquet writes: whole files only, and the same mode as any normal file."""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pytest

from edv_ray.results.parquet_io import (
    _write_bytes_atomic, read_rows, write_rows_atomic, write_table_atomic, write_text_atomic,
)

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string())])


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# small=True: built in memory, written with one open (per-episode files); both must hold
SMALL = pytest.mark.parametrize("small", [False, True], ids=["file", "small"])


@SMALL
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_has_the_mode_of_a_normal_file(tmp_path, umask, small):
    old = os.umask(umask)
    try:
        path = write_rows_atomic([{"a": 1, "b": "x"}], tmp_path / "sub" / "t.parquet", SCHEMA,
                                 small=small)
        normal = tmp_path / "config.yaml"
        normal.write_text("x: 1\n")
    finally:
        os.umask(old)
    assert _mode(path) == 0o666 & ~umask
    assert _mode(path) == _mode(normal)


@SMALL
def test_rewrite_is_atomic_and_leaves_no_temp_files(tmp_path, small):
    path = tmp_path / "t.parquet"
    write_rows_atomic([{"a": 1, "b": "x"}], path, SCHEMA, small=small)
    write_rows_atomic([{"a": 2, "b": "y"}, {"a": 3, "b": None}], path, SCHEMA, small=small)
    assert read_rows(path) == [{"a": 2, "b": "y"}, {"a": 3, "b": None}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


@SMALL
def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path, small):
    path = tmp_path / "t.parquet"
    write_rows_atomic([{"a": 1, "b": "x"}], path, SCHEMA, small=small)
    with pytest.raises((TypeError, AttributeError)):
        write_table_atomic("not a table", path, small=small)  # fails inside the write
    assert read_rows(path) == [{"a": 1, "b": "x"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_bytes_that_fail_to_write_leave_no_temp(tmp_path):
    """The one-open path fails after its temp file exists: the temp goes, the old file stays."""
    path = tmp_path / "t.txt"
    write_text_atomic(path, "old")
    with pytest.raises(TypeError):
        _write_bytes_atomic(path, 12345)  # not bytes: fails in write(), after the open
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_episode_files_are_small_and_compaction_restores_statistics(tmp_path):
    """Per-episode files skip dictionary pages and column statistics (cheaper to write);
    they read back the same, and the segment compaction makes of them has statistics."""
    import pyarrow.parquet as pq

    from edv_ray.results.store import RunStore, compact_stage, segments
    from edv_ray.results.views import connect

    store = RunStore(tmp_path)
    for i in range(3):
        store.write_episode("eval", {"run_id": "r", "stage": "eval", "episode_id": f"e{i}",
                                     "attempt": 1, "status": "ok", "task_id": f"t{i}",
                                     "experiences": [], "retrieved_item_ids": [],
                                     "retrieved_banks": []},
                            [{"run_id": "r", "episode_id": f"e{i}", "latency_s": 0.5}])
    path = store.episode_path("eval", "e1", 1)
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert col.statistics is None and not col.has_dictionary_page
    assert read_rows(path)[0]["task_id"] == "t1"
    con = connect(tmp_path)
    before = con.execute("SELECT episode_id, task_id FROM episodes ORDER BY 1").fetchall()
    con.close()
    compact_stage(tmp_path, "eval")
    seg = segments(tmp_path / "episodes" / "stage=eval")[0]
    assert pq.ParquetFile(seg).metadata.row_group(0).column(0).statistics is not None
    con = connect(tmp_path)
    assert con.execute("SELECT episode_id, task_id FROM episodes ORDER BY 1").fetchall() == before
    assert len(before) == 3


def test_a_write_of_a_few_rows_is_small_unless_told(tmp_path):
    """Stage jobs' per-task files (a candidate list, a vote, a marker) are written like
    per-episode files without being told; a write of many rows keeps its statistics, and
    ``small=False`` is obeyed."""
    import pyarrow.parquet as pq

    from edv_ray.results.parquet_io import SMALL_ROWS

    def stats(name: str, n: int, **kw) -> bool:
        path = write_rows_atomic([{"a": i, "b": str(i)} for i in range(n)], tmp_path / name,
                                 SCHEMA, **kw)
        assert [r["a"] for r in read_rows(path)] == list(range(n))
        return pq.ParquetFile(path).metadata.row_group(0).column(0).statistics is not None

    assert not stats("few.parquet", 3)
    assert not stats("edge.parquet", SMALL_ROWS)
    assert stats("many.parquet", SMALL_ROWS + 1)
    assert stats("told.parquet", 3, small=False)
