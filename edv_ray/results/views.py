"""DuckDB views over a run folder. The Ability Matrix is a query, not a data structure.

Views:
  episode_attempts  every attempt of every episode (error rows included)
  episodes          the latest attempt per (stage, episode_id)
  pass_at_1         stage × method × epoch × agent × domain: episodes (n), errors,
                    successes, Pass@1 = successes / n (an errored episode counts as a
                    failure) and its Wilson 95 % interval
  routing_matrix    the Ability Matrix each routing method used (per method × epoch; the
                    report prints the last epoch's)
  ability_matrix    executor × task type over the matrix stages: attempts (finished),
                    successes, errors, score (0.5 prior where a cell has no finished
                    attempt; ``errors_only`` marks cells that only ever errored)
  ability_by_domain the same per executor × domain (the fallback for unseen task types)
  llm_calls         every model call of an attempt that exists (``llm_call_rows``: every
                    call row; ``orphan_calls``: those of attempts whose episode row was
                    lost — a damaged segment set aside and re-run —, never counted)
  tokens_by_stage   stage × role × agent × model (``usage_unknown``: calls whose server
                    sent no valid usage; their tokens are null, not 0)
  method_results    what each method scored on each test task (rows contributed by
                    every registered method, see :mod:`edv_ray.methods.registry`)
  method_pass_at_1  method × epoch × agent × domain over method_results, with intervals
  token_use         tokens per method × phase (construction / inference) × stage × role
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import duckdb

MATRIX_STAGES = ("execute",)  # construction executions (never test runs)
MATRIX_PRIOR = 0.5
Z95 = 1.959963984540054

# Wilson score interval for s successes out of n (DuckDB macros; NULL when n = 0)
_WILSON = f"""
CREATE OR REPLACE MACRO wilson_low(s, n) AS CASE WHEN n = 0 THEN NULL ELSE
  greatest(0.0, ((s / n) + {Z95}^2 / (2 * n) - {Z95} * sqrt((s / n) * (1 - s / n) / n
  + {Z95}^2 / (4 * n * n))) / (1 + {Z95}^2 / n)) END;
CREATE OR REPLACE MACRO wilson_high(s, n) AS CASE WHEN n = 0 THEN NULL ELSE
  least(1.0, ((s / n) + {Z95}^2 / (2 * n) + {Z95} * sqrt((s / n) * (1 - s / n) / n
  + {Z95}^2 / (4 * n * n))) / (1 + {Z95}^2 / n)) END;
"""


def sql_literal(value: str) -> str:
    """A SQL string literal (views cannot take bound parameters)."""
    return "'" + str(value).replace("'", "''") + "'"


def check_hive_safe(path: str | Path) -> None:
    """A run folder whose path has a ``key=value`` folder (``runs/success=true/...``) is
    refused: DuckDB's hive partitioning would read it as a column of every row and
    override the stored one. One clear error (a ConfigError) instead."""
    from edv_ray.config_files import ConfigError

    bad = [p for p in Path(path).absolute().parts if "=" in p]
    if bad:
        raise ConfigError(f"run folder {path}: '=' in a folder name ({bad[0]!r}) would be read "
                          "as a table column by the Parquet reader; choose a path without '='")


def register_table(con, name: str, folder: Path, schema, partition_keys: list[str]) -> None:
    """A view over every Parquet file under ``folder`` (hive partitions as columns), or a
    typed empty table when there is none yet, so derived views always bind. The files are
    listed here and handed to DuckDB's relational API: a folder name is never SQL text or
    a glob pattern (``runs/r*`` would also read ``runs/r1``)."""
    import pyarrow as pa

    from edv_ray.results.integrity import check_view_types

    paths = (sorted(f for f in folder.rglob("*.parquet") if f.is_file())
             if folder.is_dir() else [])
    # DuckDB expands * ? [ in every path it is given: each is matched literally as [*] [?] [[]
    files = [re.sub(r"([*?\[])", r"[\1]", str(f)) for f in paths]
    if files:
        rel = con.read_parquet(files, hive_partitioning=True, union_by_name=True)
        check_view_types(rel.columns, rel.types, schema, paths, partition_keys)  # named
        rel.create_view(name, replace=True)
        return
    for key in partition_keys:
        if key not in schema.names:
            schema = schema.append(pa.field(key, pa.int64() if key == "epoch" else pa.string()))
    con.register(f"_{name}_empty", pa.Table.from_pylist([], schema=schema))
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")


METHOD_VIEWS = "edv_ray.methods.views"


def _columns(con, name: str) -> set[str]:
    return {r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()}


def _calls_of_existing_attempts(con) -> None:
    """``llm_calls``: the call rows whose attempt has an episode row, plus the rows of
    stage jobs and of run folders written before call rows named their attempt
    (``attempt_id`` null); ``orphan_calls``: the rest. An episode's calls are written
    before its row, so an attempt whose row was lost (a damaged segment set aside, then
    re-run under the same attempt number) leaves calls that would count twice."""
    if {"attempt_id"} <= _columns(con, "llm_call_rows") & _columns(con, "episode_attempts"):
        known = "SELECT attempt_id FROM episode_attempts WHERE attempt_id IS NOT NULL"
        con.execute(f"""CREATE OR REPLACE VIEW llm_calls AS SELECT * FROM llm_call_rows
                        WHERE attempt_id IS NULL OR attempt_id IN ({known})""")
        con.execute(f"""CREATE OR REPLACE VIEW orphan_calls AS SELECT * FROM llm_call_rows
                        WHERE attempt_id IS NOT NULL AND attempt_id NOT IN ({known})""")
    else:  # no call row names its attempt (an older run folder): every row counts
        con.execute("CREATE OR REPLACE VIEW llm_calls AS SELECT * FROM llm_call_rows")
        con.execute("CREATE OR REPLACE VIEW orphan_calls AS SELECT * FROM llm_call_rows "
                    "WHERE false")


def connect(run_dir: str | Path, matrix_stages: Iterable[str] = MATRIX_STAGES,
            con: duckdb.DuckDBPyConnection | None = None,
            with_methods: bool = True,
            matrix_method: str | None = None,
            matrix_max_epoch: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's views (empty views if no files yet).
    ``with_methods``: also every registered method's views and ``method_results``
    (:mod:`edv_ray.methods.views`). ``matrix_method``: the Ability Matrix counts only
    the construction episodes that method used (``uses``), as its Model Selector does;
    ``matrix_max_epoch``: only those of epochs up to it."""
    run_dir = Path(run_dir)
    check_hive_safe(run_dir)
    con = con or duckdb.connect()
    from edv_ray.results.schema import (CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA,
                                        ROUTING_MATRIX_SCHEMA, ROUTING_SCHEMA,
                                        SELECTION_SCHEMA, USES_SCHEMA)

    register_table(con, "episode_attempts", run_dir / "episodes", EPISODE_SCHEMA, ["stage"])
    register_table(con, "llm_call_rows", run_dir / "llm_calls", CALL_SCHEMA, ["stage"])
    _calls_of_existing_attempts(con)
    register_table(con, "pool", run_dir / "pool", POOL_SCHEMA, [])
    register_table(con, "routing", run_dir / "routing", ROUTING_SCHEMA, ["method", "epoch"])
    register_table(con, "selection", run_dir / "selection", SELECTION_SCHEMA, [])
    register_table(con, "routing_matrix", run_dir / "routing_matrix", ROUTING_MATRIX_SCHEMA,
                   ["method", "epoch"])
    register_table(con, "uses", run_dir / "uses", USES_SCHEMA, ["method"])
    stages = ", ".join(sql_literal(s) for s in matrix_stages) or "''"
    con.execute("""
        CREATE OR REPLACE VIEW episodes AS
        SELECT * FROM episode_attempts
        QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1
    """)
    only_used = "" if matrix_method is None else (
        " AND episode_id IN (SELECT episode_id FROM uses WHERE method = "
        + sql_literal(matrix_method) + ")")
    if matrix_max_epoch is not None:
        only_used += f" AND epoch <= {int(matrix_max_epoch)}"
    con.execute(f"""
        CREATE OR REPLACE VIEW matrix_episodes AS
        SELECT * FROM episodes WHERE stage IN ({stages}){only_used}
    """)
    con.execute(_WILSON)
    con.execute("""
        CREATE OR REPLACE VIEW pass_at_1 AS
        SELECT stage, method, epoch, agent, domain,
               count(*) AS episodes,
               count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) AS successes,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1,
               wilson_low(count(*) FILTER (WHERE success), count(*)) AS ci_low,
               wilson_high(count(*) FILTER (WHERE success), count(*)) AS ci_high
        FROM episodes GROUP BY ALL ORDER BY stage, method, epoch, agent, domain
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW ability_matrix AS
        WITH agents AS (
            SELECT agent FROM pool WHERE is_executor
            UNION SELECT DISTINCT agent FROM matrix_episodes
        ), types AS (
            SELECT DISTINCT task_type FROM episodes
        ), counts AS (
            SELECT agent, task_type, count(*) FILTER (WHERE status = 'ok') AS attempts,
                   count(*) FILTER (WHERE success) AS successes,
                   count(*) FILTER (WHERE status = 'error') AS errors
            FROM matrix_episodes
            GROUP BY ALL
        )
        SELECT a.agent, t.task_type,
               coalesce(c.attempts, 0) AS attempts,
               coalesce(c.successes, 0) AS successes,
               coalesce(c.errors, 0) AS errors,
               CASE WHEN coalesce(c.attempts, 0) = 0 THEN {MATRIX_PRIOR}
                    ELSE c.successes / c.attempts END AS score,
               coalesce(c.attempts, 0) = 0 AND coalesce(c.errors, 0) > 0 AS errors_only
        FROM agents a CROSS JOIN types t
        LEFT JOIN counts c ON c.agent = a.agent AND c.task_type = t.task_type
        ORDER BY a.agent, t.task_type
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW ability_by_domain AS
        SELECT agent, domain, count(*) FILTER (WHERE status = 'ok') AS attempts,
               count(*) FILTER (WHERE success) AS successes,
               count(*) FILTER (WHERE status = 'error') AS errors
        FROM matrix_episodes GROUP BY ALL ORDER BY agent, domain
    """)
    con.execute("""
        CREATE OR REPLACE VIEW tokens_by_stage AS
        SELECT stage, role, agent, model, count(*) AS calls,
               count(*) FILTER (WHERE NOT ok) AS failed_calls,
               sum(prompt_tokens) AS prompt_tokens,
               sum(completion_tokens) AS completion_tokens,
               count(*) FILTER (WHERE ok AND (prompt_tokens IS NULL
                                              OR completion_tokens IS NULL)) AS usage_unknown,
               sum(latency_s) AS latency_s
        FROM llm_calls GROUP BY ALL ORDER BY stage, role, agent
    """)
    con.execute("""
        CREATE OR REPLACE VIEW routing_basis AS
        SELECT method, epoch, basis, count(*) AS decisions,
               count(*) FILTER (WHERE basis = 'prior') AS used_prior
        FROM routing GROUP BY ALL ORDER BY method, epoch, basis
    """)
    if with_methods:  # the methods' plug-in views, found by name (methods sit above results)
        import importlib

        importlib.import_module(METHOD_VIEWS).add_method_views(con, run_dir)
    return con
