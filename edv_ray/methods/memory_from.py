"""``memory_from: RUN_DIR`` checked before any work (called by ``pipeline.validate``).

Inference from another run's memory (:mod:`edv_ray.methods.contamination` copies it
when the method starts) is only meaningful when that folder is an edv run folder of the
same benchmark whose memory, for each memory method of this run (its ``memory_dir``),
is there, readable, and holds items for every domain this run is scored on. Anything
else is one :class:`~edv_ray.config.ConfigError` naming the source — before Ray starts
and before the new run's folder is made, so a bad source leaves nothing behind (it
used to fail after Ray started, leave a folder that could neither resume nor re-run,
copy a damaged file, or run another benchmark's "memory" with 0 items and exit 0).
The source must stay in place until the run has copied it (its first method step).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from edv_ray.config import ConfigError, RunConfig, load_config
from edv_ray.methods.registry import get_method


def _domains_in(folder: Path, where: str) -> Counter:
    """Items per domain over every Parquet file under ``folder`` (each file read in
    full: a damaged one is named here, not met by DuckDB mid-run)."""
    counts: Counter = Counter()
    bad = []
    for f in sorted(folder.rglob("*.parquet")):
        if f.name.startswith("."):
            continue  # a temp file of an atomic write
        try:
            table = pq.ParquetFile(f).read(columns=["domain"])
        except Exception:  # noqa: BLE001 - any unreadable file is damage
            bad.append(f)
            continue
        counts.update(table.column("domain").to_pylist())
    if bad:
        raise ConfigError(f"{where}: damaged memory file(s) {', '.join(map(str, bad[:3]))}"
                          + (f" and {len(bad) - 3} more" if len(bad) > 3 else ""))
    return counts


def check_memory_from(cfg: RunConfig) -> None:
    if not cfg.memory_from:
        return
    src = Path(cfg.memory_from)
    where = f"memory_from {src}"
    if not src.is_dir():
        raise ConfigError(f"{where}: {'not a folder' if src.exists() else 'no such folder'}")
    if not (src / "config.yaml").is_file() or not (src / "pool").is_dir():
        raise ConfigError(f"{where}: not an edv run folder (no config.yaml and pool/)")
    try:
        source = load_config(src / "config.yaml")
    except ConfigError as err:
        raise ConfigError(f"{where}: its config.yaml cannot be read ({err})") from None
    if source.benchmark.name != cfg.benchmark.name:
        raise ConfigError(f"{where}: a {source.benchmark.name} run; this run is "
                          f"{cfg.benchmark.name} (memory does not carry over)")
    for name in cfg.method_names():
        folder = get_method(name).memory_dir
        if folder is None:
            continue
        if not (src / folder).is_dir():
            raise ConfigError(f"{where}: it has no {folder}/ folder ({name}'s memory; did "
                              f"that run use {name}?)")
        counts = _domains_in(src / folder, where)
        if counts[None]:  # items without a domain serve every domain
            continue
        missing = [d for d in cfg.benchmark.domains if not counts[d]]
        if missing:
            has = ", ".join(f"{d}: {n}" for d, n in sorted(counts.items())) or "no items"
            raise ConfigError(f"{where}: its {name} memory ({folder}/) holds no items for "
                              f"domain(s) {missing} ({has})")
