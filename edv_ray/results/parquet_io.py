"""Atomic Parquet writes: a temp file in the same folder, then ``os.replace``.

A reader (DuckDB, a resumed run) therefore sees either the whole file or none of it.
Temp files start with ``.`` so ``read_parquet('**/*.parquet')`` never matches them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq


def write_table_atomic(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write ``table`` to ``path`` atomically, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_rows_atomic(
    rows: Iterable[dict[str, Any]], path: str | os.PathLike, schema: pa.Schema
) -> Path:
    """Write dict rows with an explicit schema (so empty and sparse tables keep their types)."""
    table = pa.Table.from_pylist(list(rows), schema=schema)
    return write_table_atomic(table, path)


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a Parquet file back as dict rows ([] when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return pq.read_table(path).to_pylist()
