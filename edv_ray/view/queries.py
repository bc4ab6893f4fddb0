"""Read-only queries of the viewer over one run's DuckDB views (``results.views.connect``).

Every function takes the connection and returns plain dicts / lists. Lists are paginated
in SQL (``LIMIT`` / ``OFFSET``): nothing loads every episode into Python. Values are bound
parameters, never SQL text. The memory of every method is read through one view,
``view_items`` (:mod:`edv_ray.view.sql`, made on first use on the connection): the items
each registered method declares (``Method.memory_view.items_sql``: its banks, entries,
rejected candidates — ``kind`` says which) and the contamination experiment's twins
(kind ``poison``, method ``<m>+poison@S``). No method is named here.
"""

from __future__ import annotations

import math

from edv_ray.view.queries_item import episode, episode_page, memory_item  # noqa: F401
from edv_ray.view.sql import (
    PER_PAGE,
    clamp_page,
    count,
    ensure_views,
    once,
    pages,
    rows,
    safe_rows,
)

# ---- overview --------------------------------------------------------------------------------
_METHOD_SUMMARY = """
WITH last AS (SELECT method, max(epoch) AS epoch FROM method_results GROUP BY method)
SELECT m.method, l.epoch, count(*) AS n, count(*) FILTER (WHERE status = 'error') AS errors,
       count(*) FILTER (WHERE success) AS successes,
       count(*) FILTER (WHERE success) / count(*) AS pass_at_1,
       wilson_low(count(*) FILTER (WHERE success), count(*)) AS ci_low,
       wilson_high(count(*) FILTER (WHERE success), count(*)) AS ci_high,
       count(DISTINCT agent) AS agents, count(DISTINCT m.domain) AS domains
FROM method_results m JOIN last l ON l.method = m.method AND l.epoch = m.epoch
GROUP BY ALL ORDER BY m.method
"""

_TOKENS_BY_METHOD = """
SELECT method, phase, role, sum(calls)::BIGINT AS calls, sum(prompt_tokens)::BIGINT AS prompt_tokens,
       sum(completion_tokens)::BIGINT AS completion_tokens, sum(usage_unknown)::BIGINT AS usage_unknown,
       bool_or(shared) AS shared
FROM token_use GROUP BY ALL ORDER BY method, phase, role
"""

# the console report's tables the overview draws specially; it shows every other one
# (the run-wide tables and each method's ``report_tables``) that has rows
_DRAWN = ("method_pass_at_1", "ability_matrix", "tokens_by_stage")
_CONTAMINATION = {"contamination_share": "Contamination: the share of poison reached per bank",
                  "contamination_use": "Contamination: inference episodes that retrieved poison"}


def heat(score) -> int:
    """The colour step (0..10) of an Ability Matrix score (a CSS class, never a style)."""
    if score is None or not isinstance(score, (int, float)) or math.isnan(score):
        return -1
    return round(min(1.0, max(0.0, float(score))) * 10)


def ability_grids(con) -> list[dict]:
    """The Ability Matrix each method routed with (its last epoch), as agent × task-type
    grids; the run-wide ``ability_matrix`` view when no method routed."""
    from edv_ray.report.tables import queries

    cells = safe_rows(con, queries()["ability_matrix"][1])
    if not cells:
        cells = [{**c, "method": "(all construction executions)", "epoch": None}
                 for c in safe_rows(con, "SELECT * FROM ability_matrix")]
    grids = []
    for method in dict.fromkeys(c["method"] for c in cells):
        mine = [c for c in cells if c["method"] == method]
        agents = sorted({c["agent"] for c in mine})
        types = sorted({c["task_type"] for c in mine})
        at = {(c["agent"], c["task_type"]): c for c in mine}
        grid = [{"agent": a, "cells": [dict(at.get((a, t)) or {"score": None, "attempts": 0},
                                            heat=heat((at.get((a, t)) or {}).get("score")))
                                       for t in types]} for a in agents]
        grids.append({"method": method, "epoch": mine[0].get("epoch"), "types": types,
                      "rows": grid})
    return grids


def overview(con, run_dir=None) -> dict:
    """Pass@1 per method (last epoch, with n, errors and the Wilson 95 % interval) and
    per method × epoch × agent × domain, the Ability Matrix grids, tokens by phase / role /
    method and by stage, the validity checks (with ``run_dir``), the other tables of the
    console report that have rows, and the contamination tables where present."""
    from edv_ray.report.tables import queries

    ensure_views(con)
    counts = {r["method"]: r["items"] for r in safe_rows(
        con, "SELECT method, count(*) AS items FROM view_items WHERE NOT rejected GROUP BY 1")}
    methods = safe_rows(con, _METHOD_SUMMARY)
    for m in methods:
        m["memory_items"] = counts.get(m["method"], 0)
    tables, extra = queries(), []
    for name, (title, sql, _) in tables.items():
        if name in _DRAWN:
            continue
        found = safe_rows(con, sql)
        if found:
            extra.append({"name": name, "title": title, "rows": found})
    for name, title in _CONTAMINATION.items():
        found = safe_rows(con, f"SELECT * FROM {name}")
        if found:
            extra.append({"name": name, "title": title, "rows": found})
    out = {"methods": methods,
           "pass_at_1": safe_rows(con, tables["method_pass_at_1"][1]),
           "ability": ability_grids(con),
           "tokens": safe_rows(con, _TOKENS_BY_METHOD),
           "tokens_by_stage": safe_rows(con, tables["tokens_by_stage"][1]),
           "extra": extra, "validity": None}
    if run_dir is not None:
        from edv_ray.report.validity import run_checks

        out["validity"] = [c.row() for c in run_checks(run_dir, con)]
    return out


# ---- memory list -----------------------------------------------------------------------------
FILTERS = ("method", "bank", "epoch", "domain", "task_type")


def _where(method=None, bank=None, epoch=None, domain=None, task_type=None) -> tuple[str, list]:
    conds, params = [], []
    if method:
        conds.append("i.method = ?")
        params.append(str(method))
    if bank:
        if ":" in str(bank):  # one agent's part of a per-agent bank: ``<bank>:<owner>``
            conds.append("i.bank = ? AND i.owner = ?")
            params += str(bank).split(":", 1)
        else:
            conds.append("i.bank = ?")
            params.append(str(bank))
    if epoch not in (None, ""):
        try:
            conds.append("i.epoch = ?")
            params.append(int(epoch))
        except (TypeError, ValueError):
            conds.append("false")
    if domain:
        conds.append("i.domain = ?")
        params.append(str(domain))
    if task_type:  # the type of the item's source task (as its episodes were typed)
        conds.append("EXISTS (SELECT 1 FROM episode_attempts e WHERE e.domain = i.domain "
                     "AND e.task_id = i.task_id AND e.task_type = ?)")
        params.append(str(task_type))
    return ("WHERE " + " AND ".join(conds)) if conds else "", params


def memory_page(con, *, method=None, bank=None, epoch=None, domain=None, task_type=None,
                page=1, per_page=PER_PAGE) -> dict:
    """One page of the memory list under the filters (``bank``: a bank, or
    ``<bank>:<owner>`` — one agent's part of it), with its total and the filters' choices."""
    ensure_views(con)
    page, per_page = clamp_page(page, per_page)
    where, params = _where(method, bank, epoch, domain, task_type)
    total = count(con, f"SELECT count(*) FROM view_items i {where}", params)
    items = rows(con, f"""
        SELECT i.item_id, i.method, i.bank, i.owner, i.epoch, i.domain, i.task_id, i.title,
               i.distiller, i.kind, i.poison
        FROM view_items i {where}
        ORDER BY i.method, i.epoch NULLS LAST, i.bank, i.domain, i.item_id
        LIMIT ? OFFSET ?""", params + [per_page, (page - 1) * per_page])
    return {"items": items, "total": total, "page": page, "pages": pages(total, per_page),
            "per_page": per_page,
            "filters": {"method": method or "", "bank": bank or "", "epoch": "" if epoch is None else str(epoch),
                        "domain": domain or "", "task_type": task_type or ""}}


def filter_choices(con) -> dict:
    """The values each filter of the memory list can take (for its form; read once)."""
    ensure_views(con)
    found = once(con, "view_item_choices", """
        SELECT DISTINCT 'method' AS k, method AS v FROM view_items
        UNION SELECT DISTINCT 'bank', bank FROM view_items
        UNION SELECT DISTINCT 'bank', bank || ':' || owner FROM view_items WHERE owner IS NOT NULL
        UNION SELECT DISTINCT 'epoch', CAST(epoch AS VARCHAR) FROM view_items
        UNION SELECT DISTINCT 'domain', domain FROM view_items
        UNION SELECT DISTINCT 'task_type', task_type FROM episode_attempts""")
    out = {k: sorted(v for key, v in found if key == k and v is not None) for k in FILTERS}
    out["epoch"] = sorted(out["epoch"], key=lambda e: (len(e), e))
    out["bank"] = sorted(out["bank"], key=lambda b: (":" in b, b))
    return out
