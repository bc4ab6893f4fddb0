"""DuckDB views over the EDV stage tables (added by ``views.connect`` when present).

  candidates, distill_runs, votes, verify_runs, decisions, memory_items
  verification_audit  per verifier type and reward visibility (did the verifier see
                      the runs' grades?): approve rate, unparseable rate, and
                      P(approve | every supporting trajectory failed) — the
                      self-confirmation trap, measured
  poison_admission    known-wrong candidates: share routed to shared / private / discard
  pass_by_epoch       Pass@1 of the inference stage per epoch (errors count as failures)
  retrieval_use       inference episodes that used shared / private memory, and their Pass@1
"""

from __future__ import annotations

from pathlib import Path

def add_edv_views(con, run_dir: Path) -> bool:
    """Register the EDV views (empty when the run has no EDV stage output); returns
    whether the run has EDV output."""
    from edv_ray.methods.edv import records as R
    from edv_ray.results.views import register_table

    base = Path(run_dir) / "edv"
    for name, schema in (("candidates", R.CANDIDATE_SCHEMA), ("distill_runs", R.DISTILL_RUN_SCHEMA),
                         ("votes", R.VOTE_SCHEMA), ("verify_runs", R.VERIFY_RUN_SCHEMA),
                         ("decisions", R.DECISION_SCHEMA)):
        register_table(con, name, base / name, schema, ["epoch"])
    from edv_ray.memory import BANK_SCHEMA

    register_table(con, "_memory_files", Path(run_dir) / "memory", BANK_SCHEMA, [])
    con.execute("CREATE OR REPLACE VIEW memory_items AS SELECT * EXCLUDE (embedding) FROM _memory_files")
    con.execute("""
        CREATE OR REPLACE VIEW verification_audit AS
        SELECT verifier_type, sees_reward, count(*) AS votes,
               avg(CAST(approve AS DOUBLE)) AS approve_rate,
               avg(CAST(NOT parse_ok AS DOUBLE)) AS unparseable_rate,
               count(*) FILTER (WHERE supporting_all_failed) AS votes_all_failed,
               avg(CAST(approve AS DOUBLE)) FILTER (WHERE supporting_all_failed) AS p_approve_given_failed,
               avg(CAST(approve AS DOUBLE)) FILTER (WHERE NOT supporting_all_failed) AS p_approve_given_success
        FROM votes WHERE NOT is_poison GROUP BY ALL ORDER BY verifier_type, sees_reward
    """)
    con.execute("""
        CREATE OR REPLACE VIEW poison_admission AS
        SELECT count(*) AS poison_candidates,
               avg(CAST(route = 'shared' AS DOUBLE)) AS to_shared,
               avg(CAST(route = 'private' AS DOUBLE)) AS to_private,
               avg(CAST(route = 'discard' AS DOUBLE)) AS discarded,
               (SELECT avg(CAST(approve AS DOUBLE)) FROM votes WHERE is_poison) AS vote_approve_rate
        FROM decisions WHERE is_poison
    """)
    con.execute("""
        CREATE OR REPLACE VIEW pass_by_epoch AS
        SELECT epoch, count(*) AS episodes, count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1,
               wilson_low(count(*) FILTER (WHERE success), count(*)) AS ci_low,
               wilson_high(count(*) FILTER (WHERE success), count(*)) AS ci_high
        FROM method_episodes WHERE used_by = 'edv' AND condition = '' AND stage = 'infer'
        GROUP BY ALL ORDER BY epoch
    """)
    con.execute("""
        CREATE OR REPLACE VIEW retrieval_use AS
        SELECT list_contains(retrieved_banks, 'shared') AS used_shared,
               list_contains(retrieved_banks, 'private') AS used_private,
               count(*) AS episodes, count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1
        FROM method_episodes WHERE used_by = 'edv' AND condition = '' AND stage = 'infer'
        GROUP BY ALL ORDER BY ALL
    """)
    return base.is_dir()
