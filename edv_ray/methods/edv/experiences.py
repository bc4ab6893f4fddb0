"""EDV's tables for the reports, each instance over its own views: its run-report tables
(``Method.report_tables``) and its experiences for the W&B ``experiences`` table
(``Method.experience_sql``) — a bank item, its candidate (decisions list the items each
candidate became) and that candidate's votes; then the candidates that were discarded.
Columns: :data:`edv_ray.report.wandb_tables.EXPERIENCE_COLUMNS` less the retrieval ones."""

from __future__ import annotations

from edv_ray.memory.records import lesson_text_sql
from edv_ray.methods.edv.instance import instance

_VOTE = """verifier || ' (' || coalesce(verifier_type, '?') || '): '
    || CASE WHEN approve THEN 'approve' ELSE 'reject' END
    || CASE WHEN NOT coalesce(parse_ok, true) THEN ' (unparseable)' ELSE '' END
    || ' · reward shown: ' || CASE WHEN NOT coalesce(sees_reward, false) THEN 'hidden'
                                   WHEN context_success IS NULL THEN 'none'
                                   WHEN context_success THEN 'success' ELSE 'failure' END"""

_EDV = f"""
WITH made AS (  -- one candidate per item (two alike candidates of a task make one item)
    SELECT * FROM (SELECT candidate_id, unnest(item_ids) AS item_id, is_poison FROM {{decisions}})
    QUALIFY row_number() OVER (PARTITION BY item_id ORDER BY candidate_id) = 1
), v AS (
    SELECT candidate_id, string_agg({_VOTE}, '; ' ORDER BY verifier) AS votes,
           count(*) FILTER (WHERE approve) AS approvals,
           count(*) FILTER (WHERE NOT approve) AS rejections
    FROM {{votes}} GROUP BY candidate_id
)
SELECT '{{method}}' AS method, m.item_id,
       CASE WHEN m.bank = 'shared' THEN 'shared' ELSE 'private:' || m.owner END AS admitted,
       m.bank, m.owner, coalesce(made.is_poison, false) AS is_poison, m.domain, m.epoch,
       m.distiller, m.source_task_ids, m.supporting_trajectory_ids AS source_episode_ids,
       m.rejected_trajectory_ids AS contrasted_episode_ids, m.title, m.text,
       v.votes, v.approvals, v.rejections, made.candidate_id, NULL AS host_item_id
FROM {{memory_items}} m LEFT JOIN made USING (item_id) LEFT JOIN v USING (candidate_id)
UNION ALL BY NAME
SELECT '{{method}}' AS method, NULL AS item_id, 'discarded' AS admitted, NULL AS bank,
       NULL AS owner, c.is_poison, c.domain, c.epoch, c.distiller, [c.task_id] AS source_task_ids,
       c.supporting_episode_ids AS source_episode_ids,
       c.rejected_episode_ids AS contrasted_episode_ids, c.title,
       {lesson_text_sql("c")} AS text,
       v.votes, v.approvals, v.rejections, c.candidate_id, NULL AS host_item_id
FROM {{candidates}} c JOIN {{decisions}} d USING (candidate_id) LEFT JOIN v USING (candidate_id)
WHERE d.route = 'discard'
"""
_EDV_VIEWS = ("memory_items", "decisions", "votes", "candidates")



def experience_sql(have: set[str], name: str) -> str | None:
    """The SQL of instance ``name``'s experiences (None: the run has not its views)."""
    inst = instance(name)
    views = {v: inst.view(v) for v in _EDV_VIEWS}
    return _EDV.format(method=name, **views) if set(views.values()) <= have else None


def _table(inst, view: str, cols: str = "*", where: str = "") -> str:
    return f"SELECT method, {cols} FROM (SELECT '{inst.name}' AS method, * FROM {inst.view(view)}) {where}"


def report_tables(name: str) -> tuple[tuple[str, str, str, str], ...]:
    inst = instance(name)
    return (
        ("pass_by_epoch", "EDV inference Pass@1 per epoch",
         _table(inst, "pass_by_epoch", "epoch, episodes, errors, pass_at_1, ci_low, ci_high"),
         "method, epoch"),
        ("verification_audit", "Verification audit (non-poison votes; the self-confirmation trap)",
         _table(inst, "verification_audit", "* EXCLUDE (method)"), "method, verifier_type, sees_reward"),
        ("poison_admission", "Poison admission (known-wrong candidates injected into Verify)",
         _table(inst, "poison_admission", "* EXCLUDE (method)", "WHERE poison_candidates > 0"), "method"),
        ("retrieval_use", "Inference episodes by memory used",
         _table(inst, "retrieval_use", "* EXCLUDE (method)"), "ALL"),
    )
