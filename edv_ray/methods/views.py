"""The views every registered method adds to a run's DuckDB connection:
``method_results`` (what each method scored on each test task), ``admitted``,
``method_pass_at_1``, ``token_use`` and the memory-experiment views. Called by
:func:`edv_ray.results.views.connect` (found by name: methods sit above results)."""

from __future__ import annotations

from pathlib import Path


def add_method_views(con, run_dir: Path) -> None:
    """Each registered method adds its own tables/views and its method_results rows."""
    import pyarrow as pa

    from edv_ray.methods.contamination import add_views as add_contamination_views
    from edv_ray.methods.registry import known_methods

    methods = known_methods()
    parts, phases = [], []
    admitted = ["SELECT NULL::VARCHAR AS method, NULL::VARCHAR AS bank, 0::BIGINT AS items WHERE false"]
    for name, m in sorted(methods.items()):
        if m.add_views is not None:
            m.add_views(con, run_dir)
        parts.append(f"SELECT * FROM ({m.results_sql})")
        if m.admitted_sql:
            admitted.append(f"SELECT * FROM ({m.admitted_sql})")
        phases += [{"method": name, "stage": st, "phase": ph} for st, ph in m.phases.items()]
    con.execute("CREATE OR REPLACE VIEW method_results AS " + " UNION ALL BY NAME ".join(parts))
    con.execute("CREATE OR REPLACE VIEW admitted AS " + " UNION ALL BY NAME ".join(admitted))
    schema = pa.schema([("method", pa.string()), ("stage", pa.string()), ("phase", pa.string())])
    con.register("_method_phases", pa.Table.from_pylist(phases, schema=schema))
    add_contamination_views(con, run_dir)
    con.execute("""
        CREATE OR REPLACE VIEW method_pass_at_1 AS
        SELECT method, epoch, agent, domain, count(*) AS n,
               count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE success) AS successes,
               count(*) FILTER (WHERE success) / count(*) AS pass_at_1,
               wilson_low(count(*) FILTER (WHERE success), count(*)) AS ci_low,
               wilson_high(count(*) FILTER (WHERE success), count(*)) AS ci_high
        FROM method_results GROUP BY ALL ORDER BY method, epoch, agent, domain
    """)
    con.execute("""
        CREATE OR REPLACE VIEW token_use AS
        SELECT c.run_id, p.method, p.phase, c.stage, c.epoch, c.role, c.agent, c.model,
               count(*) AS calls, sum(c.prompt_tokens)::BIGINT AS prompt_tokens,
               sum(c.completion_tokens)::BIGINT AS completion_tokens
        FROM llm_calls c JOIN _method_phases p ON p.stage = c.stage
        WHERE p.method IN (SELECT DISTINCT method FROM episodes
                           UNION SELECT DISTINCT method FROM method_results)
        GROUP BY ALL ORDER BY p.method, p.phase, c.stage, c.role
    """)
