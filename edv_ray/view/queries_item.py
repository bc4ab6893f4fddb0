"""One memory item, one episode, and the episode list (see :mod:`edv_ray.view.queries`).

An item's provenance is its method's to tell (``Method.memory_view.provenance``: the
episodes it came from and their roles, sentences, the decisions on it and its
verifiers' votes), and an episode's use as evidence likewise (``memory_view.evidence``);
both read the run through :class:`RunReader`. Retrieval: the episodes whose
``retrieved_item_ids`` hold the item; Pass@1 of the method's inference episodes (its
``uses`` in the stages its registry entry calls inference; a poison twin: those of its
contamination condition) in the item's domain that retrieved it against those that did
not — a description, not a causal effect. Episode lookups by id read only the stage the
id names (``sql.stage_filter``).
"""

from __future__ import annotations

import json

from edv_ray.plugins import known_methods
from edv_ray.view.sql import (
    PER_PAGE,
    clamp_page,
    count,
    ensure_views,
    episode_index,
    literal,
    once,
    pages,
    rows,
    safe_rows,
    stage_filter,
)

# through sql.episode_index's temp tables (each episode's latest attempt; who retrieved what)
_LATEST = """
SELECT episode_id, stage, method, epoch, agent, domain, task_id, trial, status, success, reward
FROM view_latest WHERE episode_id IN (SELECT unnest(?::VARCHAR[])) {stages}
"""


_TASK_RUNS = """
SELECT episode_id FROM view_latest
WHERE stage = ? AND epoch = ? AND domain = ? AND task_id = ? AND list_contains(?, agent)
ORDER BY agent, trial, episode_id
"""


_RETRIEVERS = """
SELECT stage, episode_id, attempt FROM view_retrievals WHERE item_id = ?
"""


def episodes_by_id(con, ids: list[str]) -> dict[str, dict]:
    ids = [i for i in dict.fromkeys(ids) if i]
    if not ids:
        return {}
    episode_index(con)
    return {r["episode_id"]: r for r in rows(con, _LATEST.format(stages=stage_filter(con, ids)), [ids])}


class RunReader:
    """The reads a method's ``memory_view`` functions make of one run
    (:class:`edv_ray.methods.registry.MemoryReader`), over the viewer's connection and its
    episode index."""

    def __init__(self, con):
        self.con = con

    def rows(self, sql: str, params=()) -> list[dict]:
        return safe_rows(self.con, sql, params)

    def episodes(self, ids: list[str]) -> dict[str, dict]:
        return episodes_by_id(self.con, ids)

    def task_runs(self, stage: str, epoch: int, domain: str, task_id: str,
                  agents: list[str]) -> list[str]:
        episode_index(self.con)
        return [r["episode_id"] for r in rows(self.con, _TASK_RUNS,
                                              [stage, epoch, domain, task_id, list(agents)])]


def _memory_views() -> dict:
    """name → ``Method.memory_view`` of every registered method that declares one."""
    return {name: m.memory_view for name, m in sorted(known_methods().items())
            if m.memory_view is not None}


def _wilson(s: int, n: int) -> tuple:
    from edv_ray.report.stats import wilson

    if not n:
        return (None, None, None)
    r = wilson(s, n)
    return (r.rate, r.lo, r.hi)


def resolve_items(con, ids: list[str]) -> dict[str, str | None]:
    """Each id → the item shown for it: itself when listed, the item that absorbed it as a
    duplicate (``aliases``), else None (not in the run's final banks)."""
    ids = [i for i in dict.fromkeys(ids) if i]
    if not ids:
        return {}
    ensure_views(con)
    found = {r[0] for r in con.execute("SELECT item_id FROM view_items WHERE list_contains(?, item_id)",
                                       [ids]).fetchall()}
    out = {i: (i if i in found else None) for i in ids}
    rest = [i for i in ids if i not in found]
    if rest:
        for r in rows(con, "SELECT item_id, unnest(aliases) AS m FROM view_items "
                           "WHERE list_has_any(aliases, ?)", [rest]):
            if r["m"] in out and out[r["m"]] is None:
                out[r["m"]] = r["item_id"]
    return out


def _inference_stages(method: str) -> str:
    """The method's inference stages as SQL literals ("" for a method not registered)."""
    from edv_ray.methods.registry import INFERENCE

    m = known_methods().get(method)
    found = sorted(st for st, ph in (m.phases if m else {}).items() if ph == INFERENCE)
    return ", ".join(literal(st) for st in found)


def retrieval(con, item: dict, page: int = 1, per_page: int = PER_PAGE) -> dict:
    """How often the item was retrieved (a page of those episodes), and Pass@1 of the
    method's scored episodes in its domain (those of ``read_by`` alone, when set) that
    retrieved it vs those that did not."""
    page, per_page = clamp_page(page, per_page)
    iid = item["item_id"]
    episode_index(con)
    # the latest attempt of each episode that retrieved it (attempts of an episode are
    # given the same memory): filtered first, so only those rows are ranked
    # keys first (the few columns the filter needs), then only the page's rows whole
    keys = con.execute(f"SELECT *, count(*) OVER () FROM ({_RETRIEVERS}) ORDER BY stage, episode_id "
                       "LIMIT ? OFFSET ?", [iid, per_page, (page - 1) * per_page]).fetchall()
    total = (keys[0][3] if keys else 0 if page == 1 else
             con.execute(f"SELECT count(*) FROM ({_RETRIEVERS})", [iid]).fetchone()[0])
    found = episodes_by_id(con, [k[1] for k in keys])
    listed = [found[k[1]] for k in keys if k[1] in found]
    agent = item["read_by"]
    method, _, condition = str(item["method"]).partition("+")
    infer = _inference_stages(method)
    split = [] if not infer else safe_rows(con, f"""
        WITH u AS (SELECT DISTINCT episode_id FROM uses WHERE method = {literal(method)}
                   AND coalesce(condition, '') = ? AND stage IN ({infer})),
        e AS (SELECT episode_id, agent, status, success, retrieved_item_ids FROM episode_attempts
              WHERE stage IN ({infer}) AND domain = ? AND episode_id IN (SELECT episode_id FROM u)
              QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1)
        SELECT coalesce(list_contains(retrieved_item_ids, ?), false) AS retrieved, count(*) AS n,
               count(*) FILTER (WHERE success) AS successes,
               count(*) FILTER (WHERE status = 'error') AS errors
        FROM e WHERE (?::VARCHAR IS NULL OR agent = ?) GROUP BY 1""",
                                            [condition, item["domain"], iid, agent, agent])
    stats = {}
    for key, flag in (("with", True), ("without", False)):
        r = next((s for s in split if bool(s["retrieved"]) == flag), {"n": 0, "successes": 0, "errors": 0})
        p, lo, hi = _wilson(r["successes"], r["n"])
        stats[key] = {"n": r["n"], "successes": r["successes"], "errors": r["errors"],
                      "pass_at_1": p, "ci_low": lo, "ci_high": hi}
    return {"total": total, "episodes": listed, "page": page, "pages": pages(total, per_page),
            "stats": stats, "scope": f"{item['method']} inference episodes in {item['domain']}"
            + (f" by {agent}" if agent else "")}


_NOT_RETRIEVED = {"total": 0, "episodes": [], "page": 1, "pages": 1, "scope": "rejected: in no bank",
                  "stats": {k: {"n": 0, "successes": 0, "errors": 0, "pass_at_1": None,
                                "ci_low": None, "ci_high": None} for k in ("with", "without")}}


def memory_item(con, item_id: str, *, page: int = 1, per_page: int = PER_PAGE) -> dict | None:
    """One item of any bank (or a rejected candidate) with its provenance as its method
    declares it, where it was admitted, the item it twins (a poison twin) and its
    retrieval (``page``: of the retrieving episodes)."""
    ensure_views(con)
    found = rows(con, "SELECT * FROM view_items WHERE item_id = ? ORDER BY rejected, kind LIMIT 1",
                 [str(item_id)])
    if not found:
        return None
    item = found[0]
    out: dict = {"item": item, "admitted": item["admitted"], "notes": [], "votes": [], "decisions": [],
                 "sources": [], "source_roles": {}, "host": None}
    view = _memory_views().get(item["method"])
    if view is not None and view.provenance is not None:
        out.update(view.provenance(RunReader(con), item, item["method"]))
    if item.get("host_item_id"):
        out["host"] = resolve_items(con, [item["host_item_id"]]).get(item["host_item_id"])
    out["item_links"] = resolve_items(con, [i for x in out["decisions"] for i in (x.get("item_ids") or [])])
    eps = episodes_by_id(con, out["sources"])
    out["sources"] = [{"episode_id": e, "role": out["source_roles"].get(e, ""), **eps.get(e, {})}
                      for e in out["sources"]]
    out["retrieval"] = _NOT_RETRIEVED if item["rejected"] else retrieval(con, item, page, per_page)
    return out


# ---- episodes --------------------------------------------------------------------------------
_ROLES = ("user", "assistant", "tool", "system")


def _text(v) -> str:
    if v is None:
        return ""
    return v if isinstance(v, str) else json.dumps(v, indent=1, ensure_ascii=False)


def messages(raw: str | None) -> tuple[list[dict], str | None]:
    """The stored message list as display rows (role, content, tool calls, the rest as
    metadata); unparseable JSON comes back whole as text."""
    try:
        data = json.loads(raw or "[]")
    except ValueError:
        return [], raw
    if not isinstance(data, list):
        return [], raw
    out = []
    for m in data:
        if not isinstance(m, dict):
            out.append({"role": "other", "content": _text(m), "tool_calls": [], "meta": ""})
            continue
        role = str(m.get("role") or "")
        calls = [{"name": str(c.get("name") or (c.get("function") or {}).get("name") or ""),
                  "id": str(c.get("id") or ""),
                  "arguments": _text(c.get("arguments", (c.get("function") or {}).get("arguments")))}
                 for c in (m.get("tool_calls") or []) if isinstance(c, dict)]
        meta = {k: v for k, v in m.items() if k not in ("role", "content", "tool_calls") and v is not None}
        out.append({"role": role if role in _ROLES else "other", "stored_role": role,
                    "content": _text(m.get("content")), "tool_calls": calls,
                    "meta": json.dumps(meta, ensure_ascii=False, default=str) if meta else ""})
    return out, None


def episode(con, episode_id: str) -> dict | None:
    """The latest attempt of one episode: transcript, grade, the memory block it was given
    (each item resolved to its page), the stage jobs that used it as evidence, its calls."""
    ensure_views(con)
    eid = str(episode_id)
    attempts = rows(con, f"SELECT * FROM episode_attempts WHERE episode_id = ?{stage_filter(con, [eid])} "
                         "ORDER BY attempt DESC", [eid])
    if not attempts:
        return None
    ep = attempts[0]
    msgs, raw = messages(ep.pop("messages_json", None))
    try:
        grade = json.dumps(json.loads(ep.get("reward_json") or "null"), indent=1, ensure_ascii=False)
    except ValueError:
        grade = ep.get("reward_json") or ""
    ids = list(ep.get("retrieved_item_ids") or [])
    texts, banks = list(ep.get("experiences") or []), list(ep.get("retrieved_banks") or [])
    known = resolve_items(con, ids)
    block = [{"item_id": i, "link_id": known.get(i), "bank": banks[n] if n < len(banks) else "",
              "text": texts[n] if n < len(texts) else ""} for n, i in enumerate(ids)]
    extra_texts = texts[len(ids):]  # retrieved text without ids (older runs)
    reader = RunReader(con)
    evidence = [e for name, view in _memory_views().items() if view.evidence is not None
                for e in view.evidence(reader, ep, name)]
    links = resolve_items(con, [i for e in evidence for i in e.get("item_ids") or []])
    return {"episode": ep, "attempts": len(attempts), "messages": msgs, "raw_messages": raw,
            "grade": grade, "memory_block": block, "extra_texts": extra_texts, "evidence": evidence,
            "evidence_links": links,
            "uses": safe_rows(con, "SELECT DISTINCT method, stage, epoch, coalesce(condition, '') AS condition "
                                   "FROM uses WHERE episode_id = ? ORDER BY ALL", [eid]),
            "calls": _calls(con, ep)}


def _calls(con, ep: dict) -> list[dict]:
    """The model calls of the shown attempt (its ``attempt_id``; a run folder written
    before call rows named their attempt: every call row of the episode)."""
    sql = ("SELECT role, agent, model, count(*) AS calls, sum(prompt_tokens)::BIGINT AS prompt_tokens, "
           "sum(completion_tokens)::BIGINT AS completion_tokens, count(*) FILTER (WHERE NOT ok) AS failed "
           "FROM llm_call_rows WHERE episode_id = ?{stages} {attempt} GROUP BY ALL ORDER BY ALL")
    stages = stage_filter(con, [ep["episode_id"]])
    if ep.get("attempt_id"):
        found = safe_rows(con, sql.format(stages=stages, attempt="AND attempt_id = ?"),
                          [ep["episode_id"], ep["attempt_id"]])
        if found:
            return found
    return safe_rows(con, sql.format(stages=stages, attempt="").replace("llm_call_rows", "llm_calls"),
                     [ep["episode_id"]])


def episode_page(con, *, stage=None, agent=None, domain=None, outcome=None, page=1,
                 per_page=PER_PAGE) -> dict:
    """One page of the episode list (latest attempts, by stage and id: an id begins with
    its epoch, domain, task, trial and agent) under the filters; ``outcome``: success /
    failure / error. The page's keys are found first, then only its rows are read whole."""
    page, per_page = clamp_page(page, per_page)
    conds, params = [], []
    if stage:
        conds.append(f"stage = {literal(stage)}")  # a literal: DuckDB reads that folder only
    for col, val in (("agent", agent), ("domain", domain)):
        if val:
            conds.append(f"{col} = ?")
            params.append(str(val))
    where = ("WHERE " + " AND ".join(conds)) if conds else ""
    latest = ""
    if outcome:
        latest = " AND " + {"success": "success", "failure": "status = 'ok' AND NOT success",
                            "error": "status = 'error'"}.get(str(outcome), "false")
    keys = f"""SELECT stage, episode_id, attempt FROM episode_attempts {where}
               QUALIFY row_number() OVER (PARTITION BY stage, episode_id ORDER BY attempt DESC) = 1
               {latest}"""
    total = count(con, f"SELECT count(*) FROM ({keys})", params)
    found = con.execute(f"{keys} ORDER BY stage, episode_id LIMIT ? OFFSET ?",
                        params + [per_page, (page - 1) * per_page]).fetchall()
    listed = []
    if found:
        ids = [r[1] for r in found]
        by_key = {(r["stage"], r["episode_id"], r["attempt"]): r for r in rows(con, f"""
            SELECT episode_id, stage, attempt, method, epoch, agent, domain, task_id, task_type, trial,
                   status, success, reward, len(retrieved_item_ids) AS retrieved
            FROM episode_attempts WHERE list_contains(?, episode_id){stage_filter(con, ids)}""", [ids])}
        listed = [by_key[k] for k in map(tuple, found) if k in by_key]
    found_choices = once(con, "view_episode_choices", " UNION ".join(
        f"SELECT DISTINCT '{col}' AS k, {col} AS v FROM episode_attempts WHERE {col} IS NOT NULL"
        for col in ("stage", "agent", "domain")))
    one = lambda col: sorted(v for k, v in found_choices if k == col)
    return {"episodes": listed, "total": total, "page": page, "pages": pages(total, per_page),
            "per_page": per_page,
            "filters": {"stage": stage or "", "agent": agent or "", "domain": domain or "",
                        "outcome": outcome or ""},
            "choices": {"stage": one("stage"), "agent": one("agent"), "domain": one("domain"),
                        "outcome": ["success", "failure", "error"]}}
