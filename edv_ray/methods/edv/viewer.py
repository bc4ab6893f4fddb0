"""What ``edv view`` shows of an EDV instance's memory (``Method.memory_view``), each
instance over its own views: its bank items and the candidates its verifiers rejected
(``items_sql``); an item's provenance — the decisions that made it (an item that absorbed
duplicates: theirs too), the candidates, their distill jobs and the runs they contrasted,
the verifiers' votes with the grades each was shown (``provenance``); and the stage jobs
that used an episode as evidence (``evidence``)."""

from __future__ import annotations

from edv_ray.memory.records import lesson_text_sql
from edv_ray.methods.edv.instance import instance
from edv_ray.methods.registry import MemoryReader, MemoryView

EXECUTE = "execute"  # the construction executions' stage (every instance's, shared)

_ITEMS = """
SELECT item_id, '{name}' AS method, '{name}' AS kind, bank, owner, epoch, domain,
       source_task_ids[1] AS task_id, title, text, distiller,
       distiller IN ('poison', 'contamination') AS poison, NULL AS host_item_id,
       CASE WHEN bank = 'shared' THEN 'shared' ELSE 'private:' || owner END AS admitted,
       false AS rejected, coalesce(merged_item_ids, []) AS aliases, NULL AS read_by
FROM {memory_items}
UNION ALL
SELECT d.candidate_id, '{name}', 'candidate', 'rejected', NULL, d.epoch, d.domain, d.task_id,
       coalesce(c.title, '(poison candidate)'),
       CASE WHEN c.title IS NULL THEN '(the text of a planted poison candidate is not stored)'
            ELSE {lesson_text} END,
       coalesce(c.distiller, CASE WHEN d.is_poison THEN 'poison' END),
       coalesce(d.is_poison, false), NULL, 'rejected', true, []::VARCHAR[], NULL
FROM {decisions} d LEFT JOIN {candidates} c ON c.candidate_id = d.candidate_id
WHERE d.route = 'discard'
"""
_VIEWS = ("memory_items", "decisions", "candidates", "distill_runs", "votes")


def _views(name: str) -> dict[str, str]:
    inst = instance(name)
    return {v: inst.view(v) for v in _VIEWS}


def items_sql(have: set[str], name: str) -> str | None:
    """Instance ``name``'s bank items and rejected candidates (None: not its views)."""
    v = _views(name)
    needed = (v["memory_items"], v["decisions"], v["candidates"])
    return _ITEMS.format(name=name, lesson_text=lesson_text_sql("c"), **v) if set(needed) <= have else None


def _epochs(rows: list[dict]) -> str:
    """``AND epoch IN (...)``: the stage tables are partitioned by epoch (those folders only)."""
    found = sorted({int(r["epoch"]) for r in rows if r.get("epoch") is not None})
    return f" AND epoch IN ({', '.join(map(str, found))})" if found else ""


def _reward_shown(vote: dict, runs: dict[str, dict]) -> str:
    if vote.get("verifier_type") == "none":
        return "verification disabled"
    if not vote.get("sees_reward"):
        return "not shown"
    shown = []
    for eid in vote.get("context_episode_ids") or []:
        e = runs.get(eid) or {}
        r = e.get("reward")
        shown.append(("success" if e.get("success") else "failure")
                     + (f" ({r:.2f})" if isinstance(r, float) else ""))
    return "shown: " + (", ".join(shown) if shown else "no run")


def _candidate_note(c: dict) -> str:
    return (f"Distilled by {c['distiller']} ({c['distiller_type']}) from task {c['task_id']}, "
            f"epoch {c['epoch']}" + (" · every supporting run failed" if c.get("supporting_all_failed")
                                     else "") + ".")


def _distill_note(r: dict) -> str:
    return (f"Distill job: group {', '.join(r.get('group') or [])} ({r.get('group_successes')} "
            f"successes), outcomes {_shown(r)}, status "
            f"{r.get('status')}, {r.get('n_candidates')} candidates.")


def provenance(read: MemoryReader, item: dict, name: str) -> dict:
    """The decisions on the item (or rejected candidate), their candidates and distill
    jobs (as notes), the source runs — supporting, contrasted, the group's others — and
    every vote with the grades its verifier was shown."""
    v, iid = _views(name), item["item_id"]
    stored = {}
    if item["rejected"]:
        decisions = read.rows(f"SELECT * FROM {v['decisions']} WHERE candidate_id = ?", [iid])
    else:
        found = read.rows(f"SELECT supporting_trajectory_ids, rejected_trajectory_ids "
                          f"FROM {v['memory_items']} WHERE item_id = ?", [iid])
        stored = found[0] if found else {}
        decisions = read.rows(f"SELECT * FROM {v['decisions']} WHERE list_has_any(item_ids, ?) "
                              "ORDER BY epoch, task_id, candidate_id", [[iid, *item["aliases"]]])
    cand_ids = [d["candidate_id"] for d in decisions]
    epochs = _epochs(decisions)
    candidates = read.rows(f"SELECT * FROM {v['candidates']} WHERE list_contains(?, candidate_id)"
                           f"{epochs} ORDER BY epoch, task_id", [cand_ids])
    runs = [r for c in candidates for r in read.rows(
        f"SELECT * FROM {v['distill_runs']} WHERE epoch = ? AND domain = ? AND task_id = ? "
        "AND distiller = ?", [c["epoch"], c["domain"], c["task_id"], c["distiller"]])]
    votes = read.rows(f"SELECT * FROM {v['votes']} WHERE list_contains(?, candidate_id){epochs} "
                      "ORDER BY epoch, task_id, candidate_id, verifier", [cand_ids])
    roles: dict[str, str] = {}
    for c in [*candidates, {"supporting_episode_ids": stored.get("supporting_trajectory_ids"),
                            "rejected_episode_ids": stored.get("rejected_trajectory_ids")}]:
        for e in c.get("supporting_episode_ids") or []:
            roles[e] = "supporting"
        for e in c.get("rejected_episode_ids") or []:
            roles[e] = "contrasted (rejected)"
    for r in runs:  # the group's other runs (``group`` names its agents)
        for e in read.task_runs(EXECUTE, r["epoch"], r["domain"], r["task_id"], r.get("group") or []):
            roles.setdefault(e, "in the group")
    context = read.episodes([e for vote in votes for e in vote.get("context_episode_ids") or []])
    for vote in votes:
        vote["reward_shown"] = _reward_shown(vote, context)
    return {"sources": list(roles), "source_roles": roles, "decisions": decisions, "votes": votes,
            "notes": [_candidate_note(c) for c in candidates] + [_distill_note(r) for r in runs]}


def _shown(row: dict) -> str:
    return "shown" if row.get("sees_reward") else "hidden"


def _short(text, width: int = 60) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def evidence(read: MemoryReader, ep: dict, name: str) -> list[dict]:
    """The distill jobs whose group ran the episode, the candidates it supported or was
    contrasted in (and the items they became) and the votes it was context of — its own
    task's jobs (same epoch, domain and task: that epoch's folder only)."""
    if ep.get("epoch") is None:
        return []
    v, eid = _views(name), ep["episode_id"]
    same = f"{{t}}.epoch = {int(ep['epoch'])} AND {{t}}.domain = ? AND {{t}}.task_id = ?"
    where = [ep.get("domain"), ep.get("task_id")]
    runs = [] if ep.get("stage") != EXECUTE else read.rows(
        f"SELECT task_id, epoch, distiller, sees_reward, n_candidates FROM {v['distill_runs']} "
        "WHERE epoch = ? AND domain = ? AND task_id = ? AND list_contains(\"group\", ?) "
        "ORDER BY distiller", [ep["epoch"], *where, ep.get("agent")])
    candidates = read.rows(f"""
        SELECT c.candidate_id, c.distiller, c.title,
               list_contains(c.supporting_episode_ids, ?) AS supporting, d.route, d.item_ids
        FROM {v['candidates']} c LEFT JOIN {v['decisions']} d
          ON d.candidate_id = c.candidate_id AND {same.format(t="d")}
        WHERE {same.format(t="c")}
          AND (list_contains(c.supporting_episode_ids, ?) OR list_contains(c.rejected_episode_ids, ?))
        ORDER BY c.epoch, c.candidate_id""", [eid, *where, *where, eid, eid])
    votes = read.rows(f"""
        SELECT v.candidate_id, v.verifier, v.approve, v.sees_reward, d.route, d.item_ids
        FROM {v['votes']} v LEFT JOIN {v['decisions']} d
          ON d.candidate_id = v.candidate_id AND {same.format(t="d")}
        WHERE {same.format(t="v")} AND list_contains(v.context_episode_ids, ?)
        ORDER BY v.epoch, v.candidate_id, v.verifier""", [*where, *where, eid])
    return (
        [{"cls": "distill-run", "item_ids": [],
          "text": f"Distill job of task {r['task_id']} (epoch {r['epoch']}): distiller {r['distiller']}, "
                  f"outcomes {_shown(r)}, {r['n_candidates']} candidates"} for r in runs]
        + [{"cls": "candidate",
            "text": f"{'Supporting' if c['supporting'] else 'Contrasted'} run of candidate "
                    f"“{_short(c['title'])}” by {c['distiller']} → {c['route']}",
            "item_ids": [*(c["item_ids"] or []), *([c["candidate_id"]] if c["route"] == "discard" else [])]}
           for c in candidates]
        + [{"cls": "vote-context", "item_ids": list(x["item_ids"] or []),
            "text": f"Shown to verifier {x['verifier']} (vote {'approve' if x['approve'] else 'reject'}, "
                    f"outcomes {_shown(x)}) on candidate {x['candidate_id']} → {x['route']}"}
           for x in votes])


MEMORY_VIEW = MemoryView(items_sql=items_sql, provenance=provenance, evidence=evidence)
