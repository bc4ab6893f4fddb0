"""The viewer's SQL plumbing: rows as dicts, pagination, and ``view_items`` — one view
over the memory of every method on a run's connection (see :mod:`edv_ray.view.queries`):
each registered method's items as its ``Method.memory_view.items_sql`` declares them, and
the contamination experiment's poison twins."""

from __future__ import annotations

import math

import duckdb

from edv_ray.results.views import sql_literal as literal

PER_PAGE = 50

# the columns of view_items, each method's items_sql gives them all (cast to these types)
ITEM_COLUMNS = {
    "item_id": "VARCHAR",
    "method": "VARCHAR",  # the method's name (a contaminated condition: ``<method>+<condition>``)
    "kind": "VARCHAR",  # what the row is, as the method calls it (an EDV bank item, ``candidate``…)
    "bank": "VARCHAR",
    "owner": "VARCHAR",  # the agent of a per-agent bank; NULL: a bank of no one agent
    "epoch": "INTEGER",
    "domain": "VARCHAR",
    "task_id": "VARCHAR",  # the task it was learned from
    "title": "VARCHAR",
    "text": "VARCHAR",  # as retrieval serves it
    "distiller": "VARCHAR",  # who wrote it
    "poison": "BOOLEAN",  # a planted wrong item
    "host_item_id": "VARCHAR",  # a poison twin: the item it twins
    "admitted": "VARCHAR",  # where it went, as the item's page says it (``shared``, ``rejected``…)
    "rejected": "BOOLEAN",  # a candidate kept in no bank: never retrieved, not counted as memory
    "aliases": "VARCHAR[]",  # ids it absorbed as duplicates (their pages lead to it)
    "read_by": "VARCHAR",  # the one agent whose episodes can retrieve it; NULL: any agent
}

# the contamination experiment's wrong twins (methods/contamination.py; any method's banks)
_TWINS = """
    SELECT item_id, method || '+' || condition AS method, 'poison' AS kind, bank, owner,
           NULL AS epoch, domain, NULL AS task_id, title,
           '### ' || title || chr(10) || 'Rule: ' || rule AS text,
           'contamination' AS distiller, true AS poison, host_item_id,
           'poison twin in ' || bank || coalesce(':' || owner, '') AS admitted, false AS rejected,
           []::VARCHAR[] AS aliases, NULL AS read_by
    FROM contamination_items"""


def _exists(con, name: str) -> bool:
    """Whether the connection has a view or table of that name (from the catalog: a view
    is not bound, so nothing is read)."""
    return con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal",
                       [name]).fetchone()[0] > 0 or con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchone()[0] > 0


def _names(con) -> set[str]:
    """The views and tables on the connection (from the catalog)."""
    return {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal "
                                      "UNION SELECT table_name FROM duckdb_tables()").fetchall()}


def _item_parts(have: set[str]) -> list[str]:
    """The SQL of every registered method's items on a connection with views ``have``
    (in name order), then the poison twins where the run has them."""
    from edv_ray.plugins import known_methods

    parts = [sql for name, m in sorted(known_methods().items()) if m.memory_view is not None
             for sql in [m.memory_view.items_sql(have, name)] if sql]
    return parts + ([_TWINS] if "contamination_items" in have else [])


def ensure_views(con) -> None:
    """``view_items`` over every method's memory present on the connection (once): each
    part projected onto :data:`ITEM_COLUMNS`, so a declaration missing one fails here."""
    if _exists(con, "view_items"):
        return
    # every page reads the same files' footers again: keep them (results are unchanged)
    con.execute("SET parquet_metadata_cache = true")
    cols = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in ITEM_COLUMNS.items())
    parts = [f"SELECT {cols} FROM ({sql})" for sql in _item_parts(_names(con))]
    if not parts:  # no method keeps memory here: an empty, typed view
        parts = [f"SELECT {cols} FROM (SELECT " + ", ".join(f"NULL AS {c}" for c in ITEM_COLUMNS)
                 + ") WHERE false"]
    con.execute("CREATE OR REPLACE TEMP VIEW view_items AS " + " UNION ALL ".join(parts))


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
