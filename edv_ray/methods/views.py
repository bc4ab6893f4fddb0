"""The views the methods add to a run's DuckDB connection: the Ability Matrix
(:mod:`edv_ray.methods.ability_matrix`: ``ability_matrix``, ``ability_by_domain``,
``matrix_episodes``, ``routing_basis``), ``method_results`` (what each method scored on
each test task), ``admitted``, ``method_pass_at_1``, ``token_use``, ``items_injected``,
``method_reward_use`` and the memory-experiment views. Called by
:func:`edv_ray.results.views.connect` (found by name: methods sit above results)."""

from __future__ import annotations

from pathlib import Path


def add_method_views(con, run_dir: Path) -> None:
    """The Ability Matrix over the run's construction executions; each registered method
    adds its own tables/views and its method_results rows."""
    import pyarrow as pa

    from edv_ray.methods import ability_matrix
    from edv_ray.methods.contamination import add_views as add_contamination_views
    from edv_ray.methods.registry import known_methods

    ability_matrix.add_views(con)
    con.execute(METHOD_EPISODES)
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
    add_reward_use(con, run_dir)
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
    con.execute(TOKEN_USE)
    con.execute(ITEMS_INJECTED)


def add_reward_use(con, run_dir: Path) -> None:
    """``method_reward_use(method, learns_from_reward)``: where each method the run lists
    learns from the benchmark's reward (:func:`edv_ray.methods.registry.reward_use` of its
    section: ``distill, verify, routing``, ``routing``, or ``none``); no rows when the
    folder has no readable config.yaml."""
    import pyarrow as pa

    from edv_ray.config import ConfigError, load_config
    from edv_ray.methods.registry import reward_use

    rows = []
    path = Path(run_dir) / "config.yaml"
    try:
        cfg = load_config(path) if path.is_file() else None
    except (ConfigError, OSError, ValueError):
        cfg = None
    if cfg is not None:
        rows = [{"method": n, "learns_from_reward": reward_use(cfg, n)} for n in cfg.method_names()]
    schema = pa.schema([("method", pa.string()), ("learns_from_reward", pa.string())])
    con.register("_method_reward_use", pa.Table.from_pylist(rows, schema=schema))
    con.execute("CREATE OR REPLACE VIEW method_reward_use AS SELECT * FROM _method_reward_use")


# The episodes each method used (``uses``), one row per (method, condition, episode):
# ``shared`` = another method used the same episode (it ran once and is charged in full
# to each method that uses it).
METHOD_EPISODES = """
CREATE OR REPLACE VIEW method_episodes AS
WITH u AS (
    SELECT DISTINCT method AS used_by, coalesce(condition, '') AS condition, episode_id,
           memory_key
    FROM uses
), sharing AS (
    SELECT episode_id, count(DISTINCT used_by) AS n_methods FROM u GROUP BY episode_id
)
SELECT u.used_by, u.condition, u.memory_key, s.n_methods > 1 AS shared, e.*
FROM u JOIN episodes e ON e.episode_id = u.episode_id
JOIN sharing s ON s.episode_id = u.episode_id
"""

# Memory items injected into each scored episode, per method (and condition) and epoch —
# one unit for every method (EDV's k counts items, ReasoningBank's k past tasks, each
# bringing all its items): the mean and the largest number an episode received, and how
# many episodes received any.
ITEMS_INJECTED = """
CREATE OR REPLACE VIEW items_injected AS
SELECT m.method, m.epoch, count(*) AS episodes,
       count(*) FILTER (WHERE len(coalesce(e.retrieved_item_ids, [])) > 0) AS with_items,
       avg(len(coalesce(e.retrieved_item_ids, []))) AS mean_items,
       max(len(coalesce(e.retrieved_item_ids, []))) AS max_items
FROM method_results m JOIN episodes e ON e.episode_id = m.episode_id
GROUP BY ALL ORDER BY m.method, m.epoch
"""

# Tokens per method × condition × phase × stage × role: an episode's calls (every
# attempt that has an episode row: ``llm_calls`` leaves out orphans; a call whose server
# sent no valid usage has null tokens, counted in ``usage_unknown``) are charged to each method that used it (``shared`` says so); a stage job's
# calls (distill, verify, judge, rb_learn, ...) to the method owning that stage. Phases
# come from each method's ``phases`` (unlisted stages: inference).
TOKEN_USE = """
CREATE OR REPLACE VIEW token_use AS
WITH u AS (
    SELECT DISTINCT method, coalesce(condition, '') AS condition, episode_id FROM uses
), sharing AS (
    SELECT episode_id, count(DISTINCT method) > 1 AS shared FROM u GROUP BY episode_id
), charged AS (
    SELECT u.method, u.condition, s.shared, c.*
    FROM llm_calls c JOIN u ON c.episode_id = u.episode_id
    JOIN sharing s ON s.episode_id = c.episode_id
    UNION ALL BY NAME
    SELECT p.method, '' AS condition, false AS shared, c.*
    FROM llm_calls c JOIN _method_phases p ON p.stage = c.stage
    WHERE c.episode_id NOT IN (SELECT episode_id FROM u)
)
SELECT c.run_id,
       c.method || CASE WHEN c.condition = '' THEN '' ELSE '+' || c.condition END AS method,
       coalesce(p.phase, 'inference') AS phase, c.stage, c.epoch, c.role, c.agent, c.model,
       c.shared,
       count(*) AS calls, sum(c.prompt_tokens)::BIGINT AS prompt_tokens,
       sum(c.completion_tokens)::BIGINT AS completion_tokens,
       count(*) FILTER (WHERE c.ok AND (c.prompt_tokens IS NULL
                                        OR c.completion_tokens IS NULL)) AS usage_unknown
FROM charged c LEFT JOIN _method_phases p ON p.method = c.method AND p.stage = c.stage
GROUP BY ALL ORDER BY 2, 3, 4, 5
"""
