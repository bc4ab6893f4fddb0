"""Registers ReasoningBank (see the package docstring, :mod:`edv_ray.methods.reasoning_bank`)."""

from __future__ import annotations

from pathlib import Path

from edv_ray.methods.contamination import twin_stage
from edv_ray.methods.reasoning_bank.audit import audit_items, experience_sql
from edv_ray.methods.reasoning_bank.config import (EXECUTE, INFER, LEARN, NAME, STREAM,
                                                   STREAM_MATTS, ReasoningBankConfig)
from edv_ray.methods.reasoning_bank.method import run
from edv_ray.methods.reasoning_bank.viewer import MEMORY_VIEW
from edv_ray.methods.registry import (CONSTRUCTION, CONTAMINATION, INFERENCE, PER_AGENT, Method,
                                      episode_results, register)


def add_views(con, run_dir) -> None:
    from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA, JUDGMENT_SCHEMA
    from edv_ray.results.views import register_table

    base = Path(run_dir) / "rb"
    register_table(con, "rb_entries", base / "bank", ENTRY_SCHEMA, ["agent", "epoch"])
    register_table(con, "rb_judgments", base / "judgments", JUDGMENT_SCHEMA, ["agent", "epoch"])
    con.execute("""
        CREATE OR REPLACE VIEW rb_judge_audit AS
        SELECT agent, stage, count(*) AS judged,
               count(*) FILTER (WHERE NOT parse_ok) AS unparseable,
               avg(CAST(label = 'success' AS DOUBLE)) FILTER (WHERE parse_ok) AS p_judge_success,
               avg(CAST(label = 'success' AS DOUBLE)) FILTER (WHERE parse_ok AND NOT true_success)
                   AS p_judge_success_given_failed,
               avg(CAST((label = 'success') = true_success AS DOUBLE)) FILTER (WHERE parse_ok)
                   AS judge_accuracy
        FROM rb_judgments GROUP BY ALL ORDER BY agent, stage
    """)


# MaTTS on the test stream: one row per (agent, task) — the model's own best-of-k pick;
# a failed pick is a failure, a task whose learning step errored (no entry) an error.
_MATTS_RESULTS = f"""
WITH g AS (
    SELECT run_id, agent, epoch, domain, task_id, min(episode_id) AS first_id
    FROM method_episodes WHERE used_by = '{NAME}' AND stage = '{STREAM_MATTS}' GROUP BY ALL
)
SELECT g.run_id, '{NAME}' AS method, g.agent, g.epoch, g.domain, g.task_id, 0 AS trial,
       CASE WHEN e.episode_id IS NOT NULL THEN e.status
            WHEN r.entry_id IS NULL THEN 'error' ELSE 'ok' END AS status,
       CASE WHEN e.episode_id IS NOT NULL THEN e.success
            WHEN r.entry_id IS NULL THEN NULL ELSE false END AS success,
       CASE WHEN e.episode_id IS NOT NULL THEN e.reward
            WHEN r.entry_id IS NULL THEN NULL ELSE 0.0 END AS reward,
       coalesce(e.episode_id, g.first_id) AS episode_id
FROM g LEFT JOIN rb_entries r ON r.stage = '{STREAM_MATTS}' AND r.agent = g.agent
     AND r.domain = g.domain AND r.task_id = g.task_id
LEFT JOIN episodes e ON e.episode_id = r.picked_episode_id
"""

_RESULTS = (f"SELECT * FROM ({episode_results(NAME, INFER)}) UNION ALL BY NAME "
            f"SELECT * FROM ({episode_results(NAME, STREAM)}) UNION ALL BY NAME "
            f"SELECT * FROM ({_MATTS_RESULTS})")

register(Method(
    name=NAME, config_cls=ReasoningBankConfig, run=run, add_views=add_views,
    results_sql=_RESULTS, has_memory=True, memory_dir="rb/bank",
    admitted_sql=f"""SELECT '{NAME}' AS method, 'rb' AS bank, sum(len(items))::BIGINT AS items
                     FROM rb_entries HAVING count(*) > 0""",
    phases={EXECUTE: CONSTRUCTION, LEARN: CONSTRUCTION, twin_stage(NAME): CONTAMINATION,
            INFER: INFERENCE, STREAM: INFERENCE, STREAM_MATTS: INFERENCE},
    scoring=PER_AGENT, baseline=0, report_order=10, audit_items=audit_items,
    experience_sql=experience_sql,
    report_tables=(("rb_judge_audit", "ReasoningBank: self-judge labels vs true rewards",
                    "SELECT * FROM rb_judge_audit", ""),),
    judging_roles=("self_judge",), memory_view=MEMORY_VIEW,
    summary="per-model self-judged memory (ReasoningBank)"))
