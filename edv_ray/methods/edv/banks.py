"""EDV's frozen banks: one snapshot per construction epoch, and contaminated copies.

Construction writes ``memory/`` (shared + private, deduplicated). When epoch E is
complete its bank is copied, once, to ``memory_snapshots/epoch=E/`` with a
``VERSION.json`` (item count and a hash of the item ids). Everything that reads memory
reads a snapshot: epoch E+1's memory-guided executions and epoch E's inference read
snapshot E — so a resumed run never lets an episode see items from a later epoch, and
the snapshot's version is part of each episode's identity. A contaminated copy
(``memory_contaminated/poison@S/``) is the last snapshot plus wrong twins in the shared
bank (see :mod:`edv_ray.methods.contamination`). Another EDV instance keeps these folders
under its own (``edv_blind/memory_snapshots/`` …; :mod:`edv_ray.methods.edv.instance`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from edv_ray.memory import MemoryBank
from edv_ray.methods.edv.instance import EDV, Instance

VERSION_FILE = "VERSION.json"


def snapshot_dir(run_dir: Path, epoch: int, inst: Instance = EDV) -> Path:
    """Epoch ``epoch``'s frozen bank of EDV instance ``inst``."""
    return inst.memory_dir(run_dir, "memory_snapshots") / f"epoch={epoch}"


def version_of(bank_dir: Path) -> dict | None:
    """{"items": n, "version": hash} of a frozen bank, or None when it does not exist."""
    f = Path(bank_dir) / VERSION_FILE
    return json.loads(f.read_text()) if f.is_file() else None


def freeze(src: Path, dest: Path, dedup_threshold: float) -> dict:
    """Copy the bank at ``src`` to ``dest`` once (atomic: a temp folder, then rename) and
    return its version; an existing copy is kept as it is."""
    have = version_of(dest)
    if have is not None:
        return have
    bank = MemoryBank.load(src, dedup_threshold=dedup_threshold)
    return _write_frozen(bank, dest)


def _write_frozen(bank: MemoryBank, dest: Path) -> dict:
    ids = sorted(i.item_id for i in bank)
    info = {"items": len(ids), "version": hashlib.sha1("\n".join(ids).encode()).hexdigest()[:16]}
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    bank.save(tmp)
    (tmp / VERSION_FILE).write_text(json.dumps(info))
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():  # a crash between rename and VERSION cannot happen: VERSION is inside
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return info


def contaminated_copy(frozen: Path, dest: Path, twins: list, dedup_threshold: float) -> dict:
    """``frozen`` plus ``twins`` (MemoryItems) written to ``dest`` once. Twins are added
    without near-duplicate merging (a wrong twin reads much like its host)."""
    have = version_of(dest)
    if have is not None:
        return have
    from edv_ray.memory.records import normalise_text

    bank = MemoryBank.load(frozen, dedup_threshold=1.0)
    taken = {normalise_text(i.rule) for i in bank}
    unique = []
    for t in twins:  # two twins (or a twin and an item) with one rule would merge into one
        rule, n = t.rule, 1
        while normalise_text(rule) in taken:
            n += 1
            rule = f"{t.rule} (case {n})"
        taken.add(normalise_text(rule))
        unique.append(t if rule == t.rule else t.model_copy(update={"rule": rule, "item_id": ""}))
    twins = [type(t).model_validate(t.model_dump()) for t in unique]
    res = bank.add(twins)
    if len(res.added) != len(twins):
        raise RuntimeError(f"contaminated bank {dest}: {len(twins) - len(res.added)} twin(s) "
                           "merged into existing items (identical text)")
    return _write_frozen(bank, dest)
