"""Merging per-episode and per-task files off the driver (``runtime.compaction.off_driver``:
a Ray task in another process) writes the same segments as merging here, and a per-task
table read in one pass (``records.table_rows``) gives every task's rows as one read per
task does, before and after its folder is merged — empty markers, files of an earlier
version (a column missing) and files written after a merge included."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.methods.edv import records as R
from edv_ray.results import store as S
from edv_ray.results.parquet_io import write_rows_atomic, write_table_atomic
from edv_ray.results.task_tables import folder_rows, task_file_rows
from edv_ray.runtime.compaction import off_driver


def _episodes(run_dir, n: int) -> None:
    store = S.RunStore(run_dir)
    for i in range(n):
        row = {"run_id": "r", "stage": "eval", "episode_id": f"e{i}", "attempt": 1,
               "status": "ok" if i % 3 else "error", "success": i % 2 == 0, "task_id": f"t{i}",
               "experiences": [], "retrieved_item_ids": [f"m{i}"], "retrieved_banks": []}
        store.write_episode("eval", row, [{"run_id": "r", "episode_id": f"e{i}",
                                           "role": "agent", "latency_s": 0.01 * i}] * (i % 3))


def _segment(run_dir, table: str) -> pa.Table:
    (seg,) = S.segments(run_dir / table / "stage=eval")
    return pq.read_table(seg).drop_columns(["attempt_id"])  # a fresh uuid per write


def test_merged_off_the_driver_like_here(ray_session, tmp_path):
    assert off_driver(os.getpid) != os.getpid()  # the merge runs in another process
    here, there = tmp_path / "here", tmp_path / "there"
    for run_dir in (here, there):
        _episodes(run_dir, 40)
    assert S.compact_stage(here, "eval") == S.compact_stage(there, "eval", merge=off_driver) \
        == {"episodes": 40, "llm_calls": 39}
    for table in ("episodes", "llm_calls"):
        assert _segment(here, table).equals(_segment(there, table))
        assert [p.name for p in (there / table / "stage=eval").iterdir()] == [
            "compacted-00001.parquet"]  # inputs gone, no listing or temp file left


def _votes(i: int) -> list[dict]:  # 0–2 rows per task; a task with none still has a file
    return [dict(candidate_id=f"c{i}-{k}", task_id=f"t{i}", domain="d", approve=bool(k % 2),
                 verifier=f"v{k}", context_episode_ids=[f"e{i}"]) for k in range(i % 3)]


def test_a_table_read_in_one_pass(ray_session, tmp_path):
    folder = R.edv_dir(tmp_path, "votes", 0)
    names = [f"t{i:03d}.parquet" for i in range(30)]
    for i, name in enumerate(names[:20]):
        write_rows_atomic(_votes(i), folder / name, R.VOTE_SCHEMA)
    # a file of an earlier version, without a column the schema has now: nulls
    old = pa.Table.from_pylist(_votes(20), schema=R.VOTE_SCHEMA).drop_columns(["is_poison"])
    write_table_atomic(old, folder / names[20])

    def one_by_one() -> dict[str, list[dict]]:  # the old file in the schema, as merged
        out = {n: rows for n in names if (rows := task_file_rows(folder / n)) is not None}
        out[names[20]] = [{**r, "is_poison": r.get("is_poison")} for r in out[names[20]]]
        return out

    loose = R.table_rows(tmp_path, "votes", 0)
    assert loose == one_by_one() and len(loose) == 21 and loose[names[0]] == []
    assert loose[names[20]][0]["is_poison"] is None and len(loose[names[20]]) == 2
    merged = R.table_rows(tmp_path, "votes", 0, merge=True)  # merged off the driver
    assert [p.name for p in folder.iterdir()] == ["compacted-00001.parquet"]
    assert merged == loose == one_by_one()
    for i, name in enumerate(names[21:], 21):  # a resumed epoch adds tasks after the merge
        write_rows_atomic(_votes(i), folder / name, R.VOTE_SCHEMA)
    both = folder_rows(folder, R.VOTE_SCHEMA)
    assert both == one_by_one() and len(both) == 30
    assert R.compact_epoch(tmp_path, 0)["votes"] == 9
    assert R.table_rows(tmp_path, "votes", 0) == both
    assert R.table_rows(tmp_path, "candidates", 0) == {}  # no folder yet
