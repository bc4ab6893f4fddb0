"""ReasoningBank's memory for the reports: its experiences for the W&B ``experiences``
table (``Method.experience_sql``) and its items for the memory audit
(``Method.audit_items``): the items
of each agent's latest entry per (domain, task) — an earlier entry of the same task is
never retrieved (:func:`~edv_ray.methods.reasoning_bank.store.visible`), nor an item past
``max_injected`` of an entry. An item's source runs: the rollout it was extracted from
where recorded, else the entry's."""

from __future__ import annotations

from pathlib import Path


def audit_items(run_dir, section, name: str) -> list[dict]:
    from edv_ray.methods.reasoning_bank.store import load_entries, render_item, visible

    cap = getattr(section, "max_injected", None)
    out = []
    for bank in sorted((Path(run_dir) / "rb" / "bank").glob("agent=*")):
        for e in sorted(visible(load_entries(bank), None, None, set()), key=lambda e: e["entry_id"]):
            per_item = e.get("item_episode_ids") or []
            for i, item in enumerate((e.get("items") or [])[:cap]):
                source = [per_item[i]] if i < len(per_item) and per_item[i] else e.get("episode_ids")
                out.append(dict(item_id=f"{e['entry_id']}:{i}", method=name, bank="rb",
                                owner=e["agent"], domain=e["domain"], text=render_item(item),
                                source_task_ids=[e["task_id"]], source_episode_ids=list(source or []),
                                task_text=e.get("query") or ""))
    return out


# each entry's items (the agent judged its own run; no verifiers)
_RB = """
WITH e AS (
    SELECT entry_id, agent, epoch, domain, task_id, episode_ids, items,
           list_transform(list_zip(judge_labels, true_success),
               lambda x: 'self-judge ' || agent || ': ' || coalesce(x[1], '?') || ' · true outcome: '
                    || CASE WHEN x[2] IS NULL THEN '?' WHEN x[2] THEN 'success' ELSE 'failure' END)
               AS judged
    FROM rb_entries WHERE status IS NULL OR status = 'ok'
), i AS (
    SELECT *, unnest(items) AS it, unnest(range(len(items))) AS idx FROM e
)
SELECT '{method}' AS method, entry_id || ':' || idx AS item_id, 'rb:' || agent AS admitted,
       'rb' AS bank, agent AS owner, false AS is_poison, domain, epoch, agent AS distiller,
       [task_id] AS source_task_ids, episode_ids AS source_episode_ids,
       []::VARCHAR[] AS contrasted_episode_ids, it.title,
       {item_text} AS text,
       array_to_string(judged, '; ') AS votes, NULL AS approvals, NULL AS rejections,
       NULL AS candidate_id, NULL AS host_item_id
FROM i
"""


def experience_sql(have: set[str], name: str) -> str | None:
    from edv_ray.methods.reasoning_bank.store import ITEM_TEXT_SQL

    return _RB.replace("{method}", name).replace("{item_text}", ITEM_TEXT_SQL) if "rb_entries" in have else None
