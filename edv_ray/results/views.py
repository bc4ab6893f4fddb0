"""DuckDB views over a run folder. The Ability Matrix is a query, not a data structure.

Views:
  episode_attempts  every attempt of every episode (error rows included)
  episodes          the latest attempt per (stage, episode_id)
  pass_at_1         stage × method × agent × domain: episodes, errors, successes, Pass@1
  ability_matrix    executor × task type over finished episodes of the matrix stages:
                    attempts, successes, score (0.5 prior where a cell is empty)
  llm_calls         every model call; tokens_by_stage  stage × role × agent × model
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import duckdb

MATRIX_STAGES = ("execute", "eval")
MATRIX_PRIOR = 0.5


def register_table(con, name: str, folder: Path, schema, partition_keys: list[str]) -> None:
    """A view over every Parquet file under ``folder`` (hive partitions as columns), or a
    typed empty table when there is none yet, so derived views always bind."""
    import pyarrow as pa

    if any(folder.rglob("*.parquet")):
        glob = str(folder / "**" / "*.parquet").replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{glob}', "
                    "hive_partitioning=true, union_by_name=true)")
        return
    for key in partition_keys:
        schema = schema.append(pa.field(key, pa.int64() if key == "epoch" else pa.string()))
    con.register(f"_{name}_empty", pa.Table.from_pylist([], schema=schema))
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")


def connect(run_dir: str | Path, matrix_stages: Iterable[str] = MATRIX_STAGES,
            con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's views (empty views if no files yet)."""
    run_dir = Path(run_dir)
    con = con or duckdb.connect()
    from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA

    register_table(con, "episode_attempts", run_dir / "episodes", EPISODE_SCHEMA, ["stage"])
    register_table(con, "llm_calls", run_dir / "llm_calls", CALL_SCHEMA, ["stage"])
    register_table(con, "pool", run_dir / "pool", POOL_SCHEMA, [])
    stages = ", ".join("'" + s.replace("'", "''") + "'" for s in matrix_stages) or "''"
    con.execute("""
        CREATE OR REPLACE VIEW episodes AS
        SELECT * FROM episode_attempts
        QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1
    """)
    con.execute("""
        CREATE OR REPLACE VIEW pass_at_1 AS
        SELECT stage, method, agent, domain,
               count(*) AS episodes,
               count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) AS successes,
               avg(CASE WHEN status = 'ok' THEN CAST(success AS DOUBLE) END) AS pass_at_1
        FROM episodes GROUP BY ALL ORDER BY stage, method, agent, domain
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW ability_matrix AS
        WITH agents AS (
            SELECT agent FROM pool WHERE is_executor
            UNION SELECT DISTINCT agent FROM episodes WHERE stage IN ({stages})
        ), types AS (
            SELECT DISTINCT task_type FROM episodes
        ), counts AS (
            SELECT agent, task_type, count(*) AS attempts,
                   count(*) FILTER (WHERE success) AS successes
            FROM episodes WHERE status = 'ok' AND stage IN ({stages})
            GROUP BY ALL
        )
        SELECT a.agent, t.task_type,
               coalesce(c.attempts, 0) AS attempts,
               coalesce(c.successes, 0) AS successes,
               CASE WHEN coalesce(c.attempts, 0) = 0 THEN {MATRIX_PRIOR}
                    ELSE c.successes / c.attempts END AS score
        FROM agents a CROSS JOIN types t
        LEFT JOIN counts c ON c.agent = a.agent AND c.task_type = t.task_type
        ORDER BY a.agent, t.task_type
    """)
    con.execute("""
        CREATE OR REPLACE VIEW tokens_by_stage AS
        SELECT stage, role, agent, model, count(*) AS calls,
               count(*) FILTER (WHERE NOT ok) AS failed_calls,
               sum(prompt_tokens) AS prompt_tokens,
               sum(completion_tokens) AS completion_tokens,
               sum(latency_s) AS latency_s
        FROM llm_calls GROUP BY ALL ORDER BY stage, role, agent
    """)
    from edv_ray.results.edv_views import add_edv_views

    add_edv_views(con, run_dir)
    return con
