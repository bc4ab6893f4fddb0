"""One memory item, one episode, and the episode list (see :mod:`edv_ray.view.queries`).

An item's provenance: EDV's decisions name the items a candidate became (``item_ids``;
an item that absorbed duplicates lists theirs in ``merged_item_ids``), its candidate
rows name the distiller and the trajectories it contrasted, ``votes`` each verifier's
vote with the context runs it was shown (their grades only when ``sees_reward``).
Retrieval: the episodes whose ``retrieved_item_ids`` hold the item; Pass@1 of the
method's inference episodes (its ``uses`` in the stages its registry entry calls
inference; a poison twin: those of its contamination condition) in the item's domain
that retrieved it against those that did not — a description, not a causal effect.
Episode lookups by id read only the stage the id names (``sql.stage_filter``).
"""

from __future__ import annotations

import json

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


_GROUP = """
SELECT episode_id FROM view_latest
WHERE stage = 'execute' AND epoch = ? AND domain = ? AND task_id = ? AND list_contains(?, agent)
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


def _wilson(s: int, n: int) -> tuple:
    from edv_ray.report.stats import wilson

    if not n:
        return (None, None, None)
    r = wilson(s, n)
    return (r.rate, r.lo, r.hi)


def resolve_items(con, ids: list[str]) -> dict[str, str | None]:
    """Each id → the item shown for it: itself when listed, the item that absorbed it as a
    duplicate, else None (not in the run's final banks)."""
    ids = [i for i in dict.fromkeys(ids) if i]
    if not ids:
        return {}
    ensure_views(con)
    found = {r[0] for r in con.execute("SELECT item_id FROM view_items WHERE list_contains(?, item_id)",
                                       [ids]).fetchall()}
    out = {i: (i if i in found else None) for i in ids}
    rest = [i for i in ids if i not in found]
    if rest:
        for r in safe_rows(con, "SELECT item_id, unnest(merged_item_ids) AS m FROM memory_items "
                                "WHERE list_has_any(merged_item_ids, ?)", [rest]):
            if r["m"] in out and out[r["m"]] is None:
                out[r["m"]] = r["item_id"]
    return out


def _reward_shown(v: dict, ctx: dict[str, dict]) -> str:
    if v.get("verifier_type") == "none":
        return "verification disabled"
    if not v.get("sees_reward"):
        return "not shown"
    shown = []
    for eid in v.get("context_episode_ids") or []:
        e = ctx.get(eid) or {}
        r = e.get("reward")
        shown.append(("success" if e.get("success") else "failure")
                     + (f" ({r:.2f})" if isinstance(r, float) else ""))
    return "shown: " + (", ".join(shown) if shown else "no run")


def _edv_provenance(con, item: dict, out: dict) -> list[str]:
    """Decisions, candidates, distill runs and votes behind an EDV item or candidate;
    returns the source episode ids (group first, then supporting and rejected runs)."""
    if item["kind"] == "candidate":
        decisions = safe_rows(con, "SELECT * FROM decisions WHERE candidate_id = ?", [item["item_id"]])
    else:
        full = safe_rows(con, "SELECT * EXCLUDE (created_at) FROM memory_items WHERE item_id = ?",
                         [item["item_id"]])
        out["stored"] = full[0] if full else {}
        ids = [item["item_id"], *(out["stored"].get("merged_item_ids") or [])]
        decisions = safe_rows(con, "SELECT * FROM decisions WHERE list_has_any(item_ids, ?) "
                                   "ORDER BY epoch, task_id, candidate_id", [ids])
    cand_ids = [d["candidate_id"] for d in decisions]
    out["decisions"] = decisions
    epochs = _epochs(decisions)  # the tables are partitioned by epoch: read those folders only
    out["candidates"] = safe_rows(con, f"SELECT * FROM candidates WHERE list_contains(?, candidate_id)"
                                       f"{epochs} ORDER BY epoch, task_id", [cand_ids])
    runs = []
    for c in out["candidates"]:
        runs += safe_rows(con, "SELECT * FROM distill_runs WHERE epoch = ? AND domain = ? AND task_id = ? "
                               "AND distiller = ?", [c["epoch"], c["domain"], c["task_id"], c["distiller"]])
    out["distill_runs"] = runs
    votes = safe_rows(con, f"SELECT * FROM votes WHERE list_contains(?, candidate_id){epochs} "
                           "ORDER BY epoch, task_id, candidate_id, verifier", [cand_ids])
    out["votes"] = votes
    roles: dict[str, str] = {}
    stored = out.get("stored") or {}
    for c in [*out["candidates"], {"supporting_episode_ids": stored.get("supporting_trajectory_ids"),
                                   "rejected_episode_ids": stored.get("rejected_trajectory_ids")}]:
        for e in c.get("supporting_episode_ids") or []:
            roles[e] = "supporting"
        for e in c.get("rejected_episode_ids") or []:
            roles[e] = "contrasted (rejected)"
    episode_index(con)
    for r in runs:  # the group's other runs (``group`` names its agents)
        for e in rows(con, _GROUP, [r["epoch"], r["domain"], r["task_id"], list(r.get("group") or [])]):
            roles.setdefault(e["episode_id"], "in the group")
    out["source_roles"] = roles
    ctx = [e for v in votes for e in v.get("context_episode_ids") or []]
    out["_episodes"] = episodes_by_id(con, list(roles) + ctx)  # one read for sources and votes
    for v in votes:
        v["reward_shown"] = _reward_shown(v, out["_episodes"])
    return list(roles)


def _epochs(rows_: list[dict]) -> str:
    found = sorted({int(r["epoch"]) for r in rows_ if r.get("epoch") is not None})
    return f" AND epoch IN ({', '.join(map(str, found))})" if found else ""


def _admitted(item: dict) -> str:
    if item["kind"] == "candidate":
        return "rejected"
    if item["kind"] == "rb":
        return f"rb:{item['owner']}"
    if item["kind"] == "poison":
        return f"poison twin in {item['bank']}" + (f":{item['owner']}" if item.get("owner") else "")
    return "shared" if item["bank"] == "shared" else f"private:{item['owner']}"


def _inference_stages(method: str) -> str:
    """The method's inference stages as SQL literals ("" for a method not registered)."""
    from edv_ray.methods.registry import INFERENCE, known_methods

    m = known_methods().get(method)
    found = sorted(st for st, ph in (m.phases if m else {}).items() if ph == INFERENCE)
    return ", ".join(literal(st) for st in found)


def retrieval(con, item: dict, page: int = 1, per_page: int = PER_PAGE) -> dict:
    """How often the item was retrieved (a page of those episodes), and Pass@1 of the
    method's scored episodes in its domain that retrieved it vs those that did not."""
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
    agent = item["owner"] if item["kind"] == "rb" else None
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


def memory_item(con, item_id: str, *, page: int = 1, per_page: int = PER_PAGE) -> dict | None:
    """One item of any bank (or a rejected candidate) with its provenance, votes, where
    it was admitted and its retrieval (``page``: of the retrieving episodes)."""
    ensure_views(con)
    found = rows(con, "SELECT * FROM view_items WHERE item_id = ? ORDER BY kind LIMIT 1", [str(item_id)])
    if not found:
        return None
    item = found[0]
    out: dict = {"item": item, "admitted": _admitted(item), "votes": [], "decisions": [],
                 "candidates": [], "distill_runs": [], "source_roles": {}, "host": None}
    sources: list[str] = []
    if item["kind"] in ("edv", "candidate"):
        sources = _edv_provenance(con, item, out)
    elif item["kind"] == "rb":
        entry = safe_rows(con, "SELECT entry_id, stage, query, episode_ids, judge_labels, true_success, "
                               "picked_episode_id, status FROM rb_entries WHERE entry_id = ?",
                          [item["item_id"].rsplit(":", 1)[0]])
        out["entry"] = entry[0] if entry else None
        sources = list((out["entry"] or {}).get("episode_ids") or [])
        out["source_roles"] = {e: "learned from (self-judged, no reward)" for e in sources}
    elif item["kind"] == "poison" and item.get("host_item_id"):
        out["host"] = resolve_items(con, [item["host_item_id"]]).get(item["host_item_id"])
    out["item_links"] = resolve_items(con, [i for x in out["decisions"] for i in (x.get("item_ids") or [])])
    eps = out.pop("_episodes", None) or episodes_by_id(con, sources)
    out["sources"] = [{"episode_id": e, "role": out["source_roles"].get(e, ""), **eps.get(e, {})}
                      for e in sources]
    out["retrieval"] = (retrieval(con, item, page, per_page) if item["kind"] != "candidate" else
                        {"total": 0, "episodes": [], "page": 1, "pages": 1, "scope": "rejected: in no bank",
                         "stats": {k: {"n": 0, "successes": 0, "errors": 0, "pass_at_1": None,
                                       "ci_low": None, "ci_high": None} for k in ("with", "without")}})
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
    p = [eid]
    # a run is evidence for its own task's stage jobs (same epoch, domain, task): the
    # epoch-partitioned tables are read in that epoch's folder only
    same = (f"{{t}}.epoch = {int(ep['epoch'])} AND {{t}}.domain = ? AND {{t}}.task_id = ?"
            if ep.get("epoch") is not None else "false")
    where = [ep.get("domain"), ep.get("task_id")]
    evidence = {
        "candidates": safe_rows(con, f"""
            SELECT c.candidate_id, c.epoch, c.domain, c.task_id, c.distiller, c.title,
                   list_contains(c.supporting_episode_ids, ?) AS supporting, d.route, d.item_ids
            FROM candidates c LEFT JOIN decisions d ON d.candidate_id = c.candidate_id AND {same.format(t="d")}
            WHERE {same.format(t="c")}
              AND (list_contains(c.supporting_episode_ids, ?) OR list_contains(c.rejected_episode_ids, ?))
            ORDER BY c.epoch, c.candidate_id""", p + where + where + p * 2),
        "distill_runs": [] if ep.get("stage") != "execute" else safe_rows(
            con, "SELECT epoch, domain, task_id, distiller, distiller_type, status, sees_reward, "
                 "n_candidates FROM distill_runs WHERE epoch = ? AND domain = ? AND task_id = ? "
                 "AND list_contains(\"group\", ?) ORDER BY distiller",
            [ep.get("epoch"), ep.get("domain"), ep.get("task_id"), ep.get("agent")]),
        "votes": safe_rows(con, "SELECT v.candidate_id, v.epoch, v.verifier, v.approve, v.sees_reward, "
                                "d.route, d.item_ids FROM votes v LEFT JOIN decisions d "
                                f"ON d.candidate_id = v.candidate_id AND {same.format(t='d')} "
                                f"WHERE {same.format(t='v')} AND list_contains(v.context_episode_ids, ?) "
                                "ORDER BY v.epoch, v.candidate_id, v.verifier", where + where + p),
        "rb_entries": safe_rows(con, "SELECT entry_id, agent, stage, len(items) AS items FROM rb_entries "
                                     "WHERE list_contains(episode_ids, ?)", p),
        "rb_judgments": safe_rows(con, "SELECT agent, stage, label, parse_ok, reasoning FROM rb_judgments "
                                       "WHERE episode_id = ?", p),
    }
    linked = [i for c in evidence["candidates"] + evidence["votes"] for i in (c.get("item_ids") or [])]
    linked += [c["candidate_id"] for c in evidence["candidates"] + evidence["votes"]]
    evidence["links"] = resolve_items(con, linked)
    return {"episode": ep, "attempts": len(attempts), "messages": msgs, "raw_messages": raw,
            "grade": grade, "memory_block": block, "extra_texts": extra_texts, "evidence": evidence,
            "uses": safe_rows(con, "SELECT DISTINCT method, stage, epoch, coalesce(condition, '') AS condition "
                                   "FROM uses WHERE episode_id = ? ORDER BY ALL", p),
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
