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


def _glob(run_dir: Path, table: str) -> str:
    return str(run_dir / table / "**" / "*.parquet").replace("'", "''")


def connect(run_dir: str | Path, matrix_stages: Iterable[str] = MATRIX_STAGES,
            con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's views (empty views if no files yet)."""
    run_dir = Path(run_dir)
    con = con or duckdb.connect()
    src = "read_parquet('{}', hive_partitioning=true, union_by_name=true)"
    from edv_ray.results.schema import CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA

    def table_or_empty(name: str, table: str, schema) -> None:
        if any((run_dir / table).rglob("*.parquet")):
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {src.format(_glob(run_dir, table))}")
        else:  # typed empty table so the derived views still bind
            import pyarrow as pa

            empty = pa.Table.from_pylist([], schema=schema.append(pa.field("stage", pa.string())))
            con.register(f"_{name}_empty", empty)
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")

    table_or_empty("episode_attempts", "episodes", EPISODE_SCHEMA)
    table_or_empty("llm_calls", "llm_calls", CALL_SCHEMA)
    pool = run_dir / "pool" / "agents.parquet"
    if pool.exists():
        con.execute(f"CREATE OR REPLACE VIEW pool AS SELECT * FROM read_parquet('{pool}')")
    else:
        import pyarrow as pa

        con.register("_pool_empty", pa.Table.from_pylist([], schema=POOL_SCHEMA))
        con.execute("CREATE OR REPLACE VIEW pool AS SELECT * FROM _pool_empty")
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
    return con
