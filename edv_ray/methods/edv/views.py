"""DuckDB views over the EDV stage tables (added by ``views.connect`` when present).

  candidates, distill_runs, votes, verify_runs, decisions, memory_items
  verification_audit  per verifier type and reward visibility (did the verifier see
                      the runs' grades?): approve rate, unparseable rate, and
                      P(approve | every supporting trajectory failed) — the
                      self-confirmation trap, measured
  poison_admission    known-wrong candidates: share admitted to shared / private / discard
  pass_by_epoch       Pass@1 of the inference stage per epoch (errors count as failures)
  retrieval_use       inference episodes that used shared / private memory, and their Pass@1

Each EDV instance has its own set: ``edv``'s under these names, another instance's
prefixed with its name (``edv_blind_votes``, ``edv_blind_verification_audit``, …;
:meth:`edv_ray.methods.edv.instance.Instance.view`).
"""

from __future__ import annotations

from pathlib import Path

from edv_ray.methods.edv.instance import EDV, Instance


def add_edv_views(con, run_dir: Path, inst: Instance = EDV) -> bool:
    """Register EDV instance ``inst``'s views (empty when the run has no output of it);
    returns whether the run has its output."""
    from edv_ray.memory import BANK_SCHEMA
    from edv_ray.methods.edv import records as R
    from edv_ray.results.views import register_table

    v, me = inst.view, inst.name
    base = inst.tables_dir(run_dir)
    for name, schema in (("candidates", R.CANDIDATE_SCHEMA), ("distill_runs", R.DISTILL_RUN_SCHEMA),
                         ("votes", R.VOTE_SCHEMA), ("verify_runs", R.VERIFY_RUN_SCHEMA),
                         ("decisions", R.DECISION_SCHEMA)):
        register_table(con, v(name), base / name, schema, ["epoch"])
    register_table(con, v("_memory_files"), inst.memory_dir(run_dir), BANK_SCHEMA, [])
    con.execute(f"CREATE OR REPLACE VIEW {v('memory_items')} AS "
                f"SELECT * EXCLUDE (embedding) FROM {v('_memory_files')}")
    con.execute(f"""
        CREATE OR REPLACE VIEW {v('verification_audit')} AS
        SELECT verifier_type, sees_reward, count(*) AS votes,
               avg(CAST(approve AS DOUBLE)) AS approve_rate,
               avg(CAST(NOT parse_ok AS DOUBLE)) AS unparseable_rate,
               count(*) FILTER (WHERE supporting_all_failed) AS votes_all_failed,
               avg(CAST(approve AS DOUBLE)) FILTER (WHERE supporting_all_failed) AS p_approve_given_failed,
               avg(CAST(approve AS DOUBLE)) FILTER (WHERE NOT supporting_all_failed) AS p_approve_given_success
        FROM {v('votes')} WHERE NOT is_poison GROUP BY ALL ORDER BY verifier_type, sees_reward
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW {v('poison_admission')} AS
        SELECT count(*) AS poison_candidates,
               avg(CAST(route = 'shared' AS DOUBLE)) AS to_shared,
               avg(CAST(route = 'private' AS DOUBLE)) AS to_private,
               avg(CAST(route = 'discard' AS DOUBLE)) AS discarded,
               (SELECT avg(CAST(approve AS DOUBLE)) FROM {v('votes')} WHERE is_poison)
                   AS vote_approve_rate
        FROM {v('decisions')} WHERE is_poison
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW {v('pass_by_epoch')} AS
        SELECT epoch, count(*) AS episodes, count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1,
               wilson_low(count(*) FILTER (WHERE success), count(*)) AS ci_low,
               wilson_high(count(*) FILTER (WHERE success), count(*)) AS ci_high
        FROM method_episodes WHERE used_by = '{me}' AND condition = '' AND stage = 'infer'
        GROUP BY ALL ORDER BY epoch
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW {v('retrieval_use')} AS
        SELECT list_contains(retrieved_banks, 'shared') AS used_shared,
               list_contains(retrieved_banks, 'private') AS used_private,
               count(*) AS episodes, count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1
        FROM method_episodes WHERE used_by = '{me}' AND condition = '' AND stage = 'infer'
        GROUP BY ALL ORDER BY ALL
    """)
    return base.is_dir()
