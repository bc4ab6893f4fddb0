"""DuckDB views over a run folder.

Views:
  episode_attempts  every attempt of every episode (error rows included)
  episodes          the latest attempt per (stage, episode_id)
  pass_at_1         stage × method × epoch × agent × domain: episodes (n), errors,
                    successes, Pass@1 = successes / n (an errored episode counts as a
                    failure) and its Wilson 95 % interval
  routing           every solver decision a method made, with its basis
  routing_matrix    the Ability Matrix each method selected solvers with (per method ×
                    epoch; the report prints the last epoch's)
  llm_calls         every model call of an attempt that exists (``llm_call_rows``: every
                    call row; ``orphan_calls``: those of attempts whose episode row was
                    lost — a damaged segment set aside and re-run —, never counted)
  tokens_by_stage   stage × role × agent × model (``usage_unknown``: calls whose server
                    sent no valid usage; their tokens are null, not 0)

With the methods' views (``with_methods``, :mod:`edv_ray.methods.views`): the Ability
Matrix (``ability_matrix``, ``ability_by_domain``, ``matrix_episodes``,
``routing_basis``: :mod:`edv_ray.methods.ability_matrix`), ``method_results`` (what
each method scored on each test task), ``method_pass_at_1``, ``token_use`` and every
registered method's own views.
"""

from __future__ import annotations

import re
from pathlib import Path
import duckdb

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

    paths = (sorted((f for f in folder.rglob("*.parquet") if f.is_file()), key=str)
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


def connect(run_dir: str | Path, con: duckdb.DuckDBPyConnection | None = None,
            with_methods: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's views (empty views if no files yet).
    ``with_methods``: also the Ability Matrix, every registered method's views and
    ``method_results`` (:mod:`edv_ray.methods.views`)."""
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
    con.execute("""
        CREATE OR REPLACE VIEW episodes AS
        SELECT * FROM episode_attempts
        QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1
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
    if with_methods:  # the methods' plug-in views, found by name (methods sit above results)
        import importlib

        importlib.import_module(METHOD_VIEWS).add_method_views(con, run_dir)
    return con
