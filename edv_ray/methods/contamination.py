"""Memory experiments shared by methods with memory: contamination and memory_from.

**Contamination** (``contamination: x``): before inference, coherent-but-wrong items —
the benchmark's poison rules (``edv_ray/methods/poison/<domain>.yaml``) — are injected so
that they make up a share x of the method's bank. Each injected item is listed in
``contamination/method=M/items.parquet``; the ``contamination_use`` view gives, per
method, how many inference episodes retrieved one and the Pass@1 of both groups. The
poison pool is small (a few rules per domain): the share reached is recorded beside the
share asked for.

**memory_from** (``memory_from: RUN_DIR``): inference uses the memory built by another
run (e.g. a bank built by pool A, used by model B); the source is recorded in
``memory/SOURCE.json`` / ``rb/SOURCE.json``.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from edv_ray.results.parquet_io import write_rows_atomic

ITEMS_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("bank", pa.string()), ("owner", pa.string()),
    ("domain", pa.string()), ("item_id", pa.string()), ("rule", pa.string()),
    ("share_asked", pa.float64()), ("share_reached", pa.float64()),
])


@functools.lru_cache(maxsize=None)
def load_poison(domain: str) -> tuple[dict[str, Any], ...]:
    """The domain's poison rules (read once per process; callers must not mutate them)."""
    text = resources.files("edv_ray.methods").joinpath("poison", f"{domain}.yaml").read_text()
    return tuple(yaml.safe_load(text) or [])


def n_to_inject(n_clean: int, share: float, available: int) -> int:
    """Items to add so that they are ``share`` of the bank (capped by the pool)."""
    if share <= 0 or n_clean <= 0:
        return 0
    return min(available, math.ceil(share * n_clean / (1.0 - share)))


def record(run_dir: Path, method: str, rows: list[dict]) -> None:
    write_rows_atomic(rows, run_dir / "contamination" / f"method={method}" / "items.parquet",
                      ITEMS_SCHEMA)


def copy_source(src_run: str, what: str, dest: Path) -> Path:
    """Copy ``SRC_RUN/what`` (a memory folder) into ``dest`` once, with its provenance."""
    src = Path(src_run) / what
    if not src.is_dir():
        from edv_ray.config import ConfigError

        raise ConfigError(f"memory_from {src_run}: it has no {what}/ folder")
    if not dest.exists():
        shutil.copytree(src, dest)
        (dest / "SOURCE.json").write_text(json.dumps({"memory_from": str(Path(src_run).resolve()),
                                                      "folder": what}))
    return dest


def add_views(con, run_dir) -> None:
    from edv_ray.results.views import register_table

    register_table(con, "contamination_items", Path(run_dir) / "contamination", ITEMS_SCHEMA,
                   ["method"])
    con.execute("""
        CREATE OR REPLACE VIEW contamination_use AS
        WITH r AS (
            SELECT m.method, m.success, m.status,
                   EXISTS (SELECT 1 FROM contamination_items c
                           WHERE c.method = m.method
                             AND list_contains(e.retrieved_item_ids, c.item_id)) AS used_poison
            FROM method_results m JOIN episodes e USING (episode_id)
        )
        SELECT method, count(*) AS episodes,
               count(*) FILTER (WHERE used_poison) AS retrieved_poison,
               count(*) FILTER (WHERE used_poison AND success) / nullif(count(*) FILTER (WHERE used_poison), 0)
                   AS pass_at_1_with_poison,
               count(*) FILTER (WHERE NOT used_poison AND success) / nullif(count(*) FILTER (WHERE NOT used_poison), 0)
                   AS pass_at_1_without,
               (SELECT max(share_reached) FROM contamination_items c WHERE c.method = r.method) AS share
        FROM r GROUP BY method
        HAVING (SELECT count(*) FROM contamination_items c WHERE c.method = r.method) > 0
        ORDER BY method
    """)
