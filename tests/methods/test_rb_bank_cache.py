"""ReasoningBank's bank cache (store.load_entries): the training stream writes one file a
task and reads the bank before each next task, so a read must cost the files added since
the last one, not the whole bank (re-reading every file made a stream of n tasks read
n²/2 files: at 760 tasks a type the validation suite's construction world ran at ~0.2
tasks/s)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from edv_ray.methods.reasoning_bank import store


def _write(bank: Path, name: str, tasks: list[str]) -> None:
    path = bank / "epoch=0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"entry_id": [f"{name}-{t}" for t in tasks], "domain": ["d"] * len(tasks),
                             "task_id": tasks, "items": [[{"title": t}] for t in tasks],
                             "query_embedding": [[1.0, 0.0]] * len(tasks)}), path)


def test_reading_the_bank_again_reads_only_files_added_or_changed(tmp_path, monkeypatch):
    reads: list[str] = []
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda f, *a, **k: reads.append(Path(f).name) or real(f, *a, **k))
    bank = tmp_path / "bank"
    for i in range(5):
        _write(bank, f"e{i}.parquet", [f"t{i}"])
    assert sorted(e["task_id"] for e in store.load_entries(bank)) == [f"t{i}" for i in range(5)]
    assert len(reads) == 5
    reads.clear()
    assert len(store.load_entries(bank)) == 5 and reads == []  # nothing new: nothing read

    _write(bank, "e5.parquet", ["t5"])  # the stream's next task
    assert len(store.load_entries(bank)) == 6 and reads == ["e5.parquet"]

    reads.clear()  # a file rewritten in place (here with two entries) is read again
    _write(bank, "e2.parquet", ["t2", "t2b"])
    os.utime(bank / "epoch=0" / "e2.parquet", ns=(1, 1))
    got = sorted(e["task_id"] for e in store.load_entries(bank))
    assert got == ["t0", "t1", "t2", "t2b", "t3", "t4", "t5"] and reads == ["e2.parquet"]

    reads.clear()  # a file removed (compaction) takes its entries with it
    (bank / "epoch=0" / "e0.parquet").unlink()
    assert "t0" not in {e["task_id"] for e in store.load_entries(bank)} and reads == []
    assert {e["epoch"] for e in store.load_entries(bank)} == {0}
