"""The viewer's SQL plumbing: rows as dicts, pagination, and ``view_items`` — one view
over the memory of every method on a run's connection (see :mod:`edv_ray.view.queries`)."""

from __future__ import annotations

import math

import duckdb

from edv_ray.results.views import sql_literal as literal

PER_PAGE = 50

_PARTS = {
    "memory_items": """
        SELECT item_id, coalesce(method, 'edv') AS method, bank, owner, epoch, domain,
               source_task_ids[1] AS task_id, title, text, distiller,
               'edv' AS kind,
               distiller IN ('poison', 'contamination') AS poison, NULL::VARCHAR AS host_item_id
        FROM memory_items""",
    "decisions": """
        SELECT d.candidate_id AS item_id, 'edv' AS method, 'rejected' AS bank,
               NULL::VARCHAR AS owner, d.epoch, d.domain, d.task_id,
               coalesce(c.title, '(poison candidate)') AS title,
               CASE WHEN c.title IS NULL THEN '(the text of a planted poison candidate is not stored)'
                    ELSE '### ' || c.title || chr(10) || 'When to use: ' || c.when_to_use
                         || chr(10) || 'Rule: ' || c.rule END AS text,
               coalesce(c.distiller, CASE WHEN d.is_poison THEN 'poison' END) AS distiller,
               'candidate' AS kind, coalesce(d.is_poison, false) AS poison,
               NULL::VARCHAR AS host_item_id
        FROM decisions d LEFT JOIN candidates c ON c.candidate_id = d.candidate_id
        WHERE d.route = 'discard'""",
    "rb_entries": """
        SELECT entry_id || ':' || (i - 1) AS item_id, 'reasoning_bank' AS method, 'rb' AS bank,
               agent AS owner, epoch, domain, task_id, it.title AS title,
               '### ' || it.title || chr(10) || it.description || chr(10) || it.content AS text,
               agent AS distiller, 'rb' AS kind, false AS poison, NULL::VARCHAR AS host_item_id
        FROM (SELECT *, unnest(items) AS it, generate_subscripts(items, 1) AS i
              FROM rb_entries WHERE len(items) > 0)""",
    "contamination_items": """
        SELECT item_id, method || '+' || condition AS method, bank, owner,
               NULL::INTEGER AS epoch, domain, NULL::VARCHAR AS task_id, title,
               '### ' || title || chr(10) || 'Rule: ' || rule AS text,
               'contamination' AS distiller, 'poison' AS kind, true AS poison, host_item_id
        FROM contamination_items""",
}


def _exists(con, name: str) -> bool:
    """Whether the connection has a view or table of that name (from the catalog: a view
    is not bound, so nothing is read)."""
    return con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal",
                       [name]).fetchone()[0] > 0 or con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchone()[0] > 0


def ensure_views(con) -> None:
    """``view_items`` over every method's memory present on the connection (once)."""
    if _exists(con, "view_items"):
        return
    # every page reads the same files' footers again: keep them (results are unchanged)
    con.execute("SET parquet_metadata_cache = true")
    parts = [sql for source, sql in _PARTS.items() if _exists(con, source)
             and (source != "decisions" or _exists(con, "candidates"))]
    if not parts:  # connected without the method views: an empty, typed view
        parts = [("SELECT NULL::VARCHAR AS item_id, NULL::VARCHAR AS method, NULL::VARCHAR AS bank, "
                  "NULL::VARCHAR AS owner, NULL::INTEGER AS epoch, NULL::VARCHAR AS domain, "
                  "NULL::VARCHAR AS task_id, NULL::VARCHAR AS title, NULL::VARCHAR AS text, "
                  "NULL::VARCHAR AS distiller, NULL::VARCHAR AS kind, false AS poison, "
                  "NULL::VARCHAR AS host_item_id WHERE false")]
    con.execute("CREATE OR REPLACE TEMP VIEW view_items AS "
                + " UNION ALL BY NAME ".join(f"SELECT * FROM ({p})" for p in parts))


def once(con, name: str, sql: str) -> list[tuple]:
    """A small query's answer kept on the connection (a temp table made on first use):
    the views read the files listed when the connection was made, so it cannot change."""
    if not _exists(con, name):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")
    return con.execute(f"SELECT * FROM {name}").fetchall()


_LATEST_ATTEMPTS = """
    SELECT episode_id, stage, method, epoch, agent, domain, task_id, trial, status, success,
           reward, attempt, retrieved_item_ids
    FROM episode_attempts
    QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1"""


def episode_index(con) -> None:
    """Two temp tables made on first use, so an item's page looks episodes up instead of
    scanning every segment (the views read the files listed at connect: they cannot
    change): ``view_latest`` (each episode's latest attempt: keys and grade) and
    ``view_retrievals`` (item id → the episodes whose latest attempt retrieved it)."""
    if not _exists(con, "view_latest"):
        con.execute("CREATE OR REPLACE TEMP TABLE view_latest AS "
                    f"SELECT * EXCLUDE (retrieved_item_ids) FROM ({_LATEST_ATTEMPTS})")
    if not _exists(con, "view_retrievals"):
        con.execute("CREATE OR REPLACE TEMP TABLE view_retrievals AS SELECT DISTINCT item_id, "
                    "stage, episode_id, attempt FROM (SELECT unnest(retrieved_item_ids) AS item_id, "
                    f"stage, episode_id, attempt FROM ({_LATEST_ATTEMPTS}))")


def count(con, sql: str, params=()) -> int:
    """``SELECT count(*) ...`` answered once per query and parameters on a connection
    (a list's total: every page of it asks the same)."""
    once(con, "view_counts", "SELECT ''::VARCHAR AS k, 0::BIGINT AS n WHERE false")
    key = repr((sql, [str(p) for p in params]))
    hit = con.execute("SELECT n FROM view_counts WHERE k = ?", [key]).fetchone()
    if hit is not None:
        return hit[0]
    n = con.execute(sql, list(params)).fetchone()[0]
    con.execute("INSERT INTO view_counts VALUES (?, ?)", [key, n])
    return n


def stages(con) -> list[str]:
    """The run's episode stages (the ``stage=`` folders), listed once per connection."""
    return sorted(r[0] for r in once(con, "view_stages", "SELECT DISTINCT stage FROM episode_attempts "
                                                      "WHERE stage IS NOT NULL"))


def stage_filter(con, ids, column: str = "stage") -> str:
    """``AND stage IN (...)`` for episode ids: an id starts with its stage and ``-``
    (``runtime.spec.episode_id``), so only those stages' files are read. Empty (no
    pruning) when an id matches no stage."""
    known = stages(con)
    found = set()
    for i in ids:
        hits = [st for st in known if str(i).startswith(st + "-")]
        if not hits:
            return ""
        found.update(hits)
    if not found:
        return ""
    return f" AND {column} IN (" + ", ".join(literal(st) for st in sorted(found)) + ")"


def rows(con, sql: str, params=()) -> list[dict]:
    cur = con.execute(sql, list(params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def pages(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))


def clamp_page(page, per_page) -> tuple[int, int]:
    try:
        page = max(1, int(page))
    except (TypeError, ValueError):
        page = 1
    try:
        per_page = min(500, max(1, int(per_page)))
    except (TypeError, ValueError):
        per_page = PER_PAGE
    return page, per_page




def safe_rows(con, sql: str, params=()) -> list[dict]:
    """Rows, or none when the run's connection lacks a view the query reads."""
    try:
        return rows(con, sql, params)
    except (duckdb.CatalogException, duckdb.BinderException):
        return []
