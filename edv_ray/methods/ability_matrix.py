"""The Ability Matrix: how often each executor succeeded on each task type, counted over
construction executions. It is a query, not a data structure: DuckDB views over the
run's episodes, read when a method selects its solvers and stored with its decisions.

Views (names are public: the report, the viewer and the README query them):
  matrix_episodes    the episodes the matrix counts: the matrix stages (construction
                     executions, never test runs); for one method, only those it used
                     (``uses``), in epochs up to a given one
  ability_matrix     executor × task type: attempts (finished), successes, errors, score
                     (:data:`PRIOR` where a cell has no finished attempt; ``errors_only``
                     marks cells that only ever errored)
  ability_by_domain  the same per executor × domain (the fallback for unseen task types)
  routing_basis      the solver decisions (``routing/``) per method × epoch × basis

Stored: ``routing_matrix/method=M/epoch=E/part.parquet``, the cells a method selected
with (:func:`method_matrix`), read back by :func:`stored_matrix` (``memory_from``).
The Model Selector's rule over the cells is :mod:`edv_ray.methods.selector`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

MATRIX_STAGES = ("execute",)  # construction executions (never test runs)
PRIOR = 0.5  # the paper's score of a cell with no finished attempt
Cell = tuple[int, int, int]  # (attempts, successes, errors)


def add_views(con, stages: Iterable[str] = MATRIX_STAGES, method: str | None = None,
              max_epoch: int | None = None) -> None:
    """The matrix views on a connection that has the run's ``episodes``, ``pool``, ``uses``
    and ``routing`` (:func:`edv_ray.results.views.connect`). ``method``: count only the
    construction episodes that method used, as its selection does; ``max_epoch``: only
    those of epochs up to it."""
    from edv_ray.results.views import sql_literal

    listed = ", ".join(sql_literal(s) for s in stages) or "''"
    only_used = "" if method is None else (
        " AND episode_id IN (SELECT episode_id FROM uses WHERE method = "
        + sql_literal(method) + ")")
    if max_epoch is not None:
        only_used += f" AND epoch <= {int(max_epoch)}"
    con.execute(f"""
        CREATE OR REPLACE VIEW matrix_episodes AS
        SELECT * FROM episodes WHERE stage IN ({listed}){only_used}
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
               CASE WHEN coalesce(c.attempts, 0) = 0 THEN {PRIOR}
                    ELSE c.successes / c.attempts END AS score,
               coalesce(c.attempts, 0) = 0 AND coalesce(c.errors, 0) > 0 AS errors_only
        FROM agents a CROSS JOIN types t
        LEFT JOIN counts c ON c.agent = a.agent AND c.task_type = t.task_type
        ORDER BY a.agent, t.task_type
    """)
    con.execute("""
        CREATE OR REPLACE VIEW ability_by_domain AS
        SELECT agent, domain, count(*) FILTER (WHERE status = 'ok') AS attempts,
               count(*) FILTER (WHERE success) AS successes,
               count(*) FILTER (WHERE status = 'error') AS errors
        FROM matrix_episodes GROUP BY ALL ORDER BY agent, domain
    """)
    con.execute("""
        CREATE OR REPLACE VIEW routing_basis AS
        SELECT method, epoch, basis, count(*) AS decisions,
               count(*) FILTER (WHERE basis = 'prior') AS used_prior
        FROM routing GROUP BY ALL ORDER BY method, epoch, basis
    """)


def counted_cells(run_dir: str | Path, method: str, epoch: int) -> list[dict]:
    """The matrix ``method`` selects with at ``epoch``: its own construction executions
    (``uses``) of epochs up to ``epoch`` — an evaluation never selects on later evidence.
    One cell per (level, key, agent): level ``task_type`` (key: the task type) and
    ``domain`` (key: the domain, the fallback row)."""
    from edv_ray.results.views import connect

    con = connect(run_dir, with_methods=False)
    try:
        add_views(con, method=method, max_epoch=epoch)
        cells = [dict(level="task_type", key=t, agent=a, attempts=n, successes=s, errors=e)
                 for a, t, n, s, e in con.execute(
                     "SELECT agent, task_type, attempts, successes, errors FROM ability_matrix"
                 ).fetchall()]
        cells += [dict(level="domain", key=d, agent=a, attempts=n, successes=s, errors=e)
                  for a, d, n, s, e in con.execute(
                      "SELECT agent, domain, attempts, successes, errors FROM ability_by_domain"
                  ).fetchall()]
    finally:
        con.close()
    return cells


def method_matrix(run_dir: str | Path, run_id: str, method: str, epoch: int,
                  matrix_from: Path | None = None) -> list[dict]:
    """The cells ``method`` selects with at ``epoch`` (:func:`counted_cells`, or those
    stored at ``matrix_from``: another run's, for ``memory_from``), written to
    ``routing_matrix/method=M/epoch=E/part.parquet`` (the report prints it)."""
    from edv_ray.results.parquet_io import read_rows, write_rows_atomic
    from edv_ray.results.schema import ROUTING_MATRIX_SCHEMA

    cells = read_rows(matrix_from) if matrix_from is not None else counted_cells(run_dir, method, epoch)
    matrix = [dict(c, run_id=run_id, method=method, epoch=epoch,
                   score=(c["successes"] / c["attempts"]) if c["attempts"] else None)
              for c in cells]
    write_rows_atomic(matrix, _matrix_folder(run_dir, method) / f"epoch={epoch}" / "part.parquet",
                      ROUTING_MATRIX_SCHEMA)
    return matrix


def stored_matrix(run_dir: str | Path, method: str) -> Path | None:
    """The file of the last epoch's matrix ``method`` stored in a run (None when it stored
    none, or an empty one)."""
    from edv_ray.results.parquet_io import read_rows

    epochs = sorted(_matrix_folder(run_dir, method).glob("epoch=*/part.parquet"),
                    key=lambda p: int(p.parent.name.removeprefix("epoch=")))
    return epochs[-1] if epochs and read_rows(epochs[-1]) else None


def row(cells: list[dict], level: str, key: str) -> dict[str, Cell]:
    """One row of the matrix (``level`` task_type or domain, its ``key``): agent → cell."""
    return {c["agent"]: (c["attempts"], c["successes"], c["errors"])
            for c in cells if c["level"] == level and c["key"] == key}


def _matrix_folder(run_dir: str | Path, method: str) -> Path:
    return Path(run_dir) / "routing_matrix" / f"method={method}"
