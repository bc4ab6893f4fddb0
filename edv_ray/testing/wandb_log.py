"""Reading W&B's offline files back (tests): the ``.wandb`` transaction log of a run.

wandb 0.31 ships no Python reader (its service is in Go); the format is LevelDB's log
format holding ``wandb.proto`` ``Record`` messages, which W&B's own protobuf classes
parse: a 7-byte file header (":W&B", magic, version), then 32 KiB blocks of chunks
(crc32, length, type: 1 full, 2 first, 3 middle, 4 last).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7


def records(path: Path):
    """Every ``Record`` in a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, buf = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer: padding
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + HEADER:pos + HEADER + n], pos + HEADER + n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf + chunk if kind == 4 else chunk)
            buf = b""
            yield rec
        else:
            buf = chunk if kind == 2 else buf + chunk


def kinds(recs) -> list[str]:
    return [r.WhichOneof("record_type") for r in recs]


def history(recs) -> list[dict]:
    """The logged steps (``_step``, ``_timestamp`` and the logged keys)."""
    out = []
    for r in recs:
        if r.WhichOneof("record_type") == "history":
            out.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in r.history.item})
    return out


def run_record(recs):
    """The run's ``RunRecord`` (id, group, config, ...)."""
    return next(r.run for r in recs if r.WhichOneof("record_type") == "run")


def summary(recs) -> dict:
    return {u.key: json.loads(u.value_json) for r in recs
            if r.WhichOneof("record_type") == "summary" for u in r.summary.update if u.key}


def exit_code(recs) -> int | None:
    """The exit code of the run's ``exit`` record (``None``: the run was never closed)."""
    ends = [r.exit.exit_code for r in recs if r.WhichOneof("record_type") == "exit"]
    return ends[-1] if ends else None


def offline_logs(run_dir: Path) -> list[Path]:
    """The run folder's offline ``.wandb`` files, oldest session first."""
    files = (Path(run_dir) / "wandb").glob("offline-run-*/run-*.wandb")
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.parent.name))
