"""Validity check: how much of the runs' evidence each stage role saw.

Every stage prompt that shows transcripts (distiller, verifier, Judge, ReasoningBank's
self-judge and extractor) records the characters of the transcripts whole and kept, and
whether every final state stayed whole (``llm_calls.evidence_*``, filled by
:mod:`edv_ray.prompts.budget` through the stage jobs). One row per (stage, role): the
number of calls, the smallest and the mean share kept, how many were shortened.

It fails when a judging role (``Method.judging_roles`` of any registered method) saw less than
:data:`MIN_JUDGING_SHARE` of a prompt's transcripts, or when any prompt lost a final
state: a verdict reached on half a run, or on a run whose end was cut, does not mean
what the tables say it means.
"""

from __future__ import annotations

from edv_ray.report.method_facts import judging_roles
from edv_ray.report.validity import Check, check

MIN_JUDGING_SHARE = 0.5  # of a prompt's transcript characters


def _owners(con) -> dict[str, str]:
    """stage → the methods it belongs to (empty where the method views are not loaded)."""
    try:
        rows = con.execute("SELECT stage, string_agg(DISTINCT method, ',' ORDER BY method) "
                           "FROM _method_phases GROUP BY stage").fetchall()
    except Exception:  # noqa: BLE001 - a connection without method views
        return {}
    return dict(rows)


@check
def evidence_kept(con, run_dir) -> list[Check]:
    columns = {r[0] for r in con.execute("DESCRIBE llm_calls").fetchall()}
    if "evidence_chars" not in columns:  # no stage prompt recorded (or an older run)
        return []
    rows = con.execute("""
        SELECT stage, role, count(*) AS calls,
               min(CASE WHEN evidence_chars > 0 THEN evidence_kept / evidence_chars ELSE 1 END),
               avg(CASE WHEN evidence_chars > 0 THEN evidence_kept / evidence_chars ELSE 1 END),
               count(*) FILTER (WHERE evidence_kept < evidence_chars),
               count(*) FILTER (WHERE NOT evidence_final_kept),
               count(*) FILTER (WHERE role IN (SELECT unnest(?))
                                AND evidence_kept < ? * evidence_chars)
        FROM llm_calls WHERE evidence_chars IS NOT NULL
        GROUP BY stage, role ORDER BY stage, role
    """, [list(judging_roles()), MIN_JUDGING_SHARE]).fetchall()
    owners = _owners(con)
    out = []
    for stage, role, calls, low, mean, shortened, lost_final, too_little in rows:
        problems = []
        if lost_final:
            problems.append(f"{lost_final} prompt(s) lost a run's final state")
        if too_little:
            problems.append(f"{too_little} prompt(s) kept under {MIN_JUDGING_SHARE:.0%} of "
                            "the transcripts (a judging role)")
        figure = (f"{role} ({stage}): {calls} calls, kept min {low:.0%} / mean {mean:.0%}, "
                  f"{shortened} shortened")
        detail = "; ".join(problems) or (
            "every transcript whole" if not shortened else
            "shortened by the evidence rule (head and final state kept)")
        out.append(Check("evidence_kept", not problems, figure, detail, owners.get(stage, "")))
    return out
