"""The built-in validity checks (see :mod:`edv_ray.report.validity`): that every method
ran what its name says — scored every task (per its declared ``Method.scoring``), shared
only provably identical episodes, passed the checks it declares itself
(``Method.validity_checks``: e.g. EDV used its memory where it should and saw no reward
its config hides), sent the seeds its agents were given, was contaminated by the share
asked in the domains asked, and routed on task types that training had seen."""

from __future__ import annotations

from edv_ray.methods.registry import PICK
from edv_ray.report.validity import Check, check


def _config(run_dir):
    from edv_ray.config import load_config

    path = run_dir / "config.yaml"
    return load_config(path) if path.is_file() else None


@check
def tasks_scored(con, run_dir) -> list[Check]:
    """Every method (and contaminated condition) scored every selected test task × trial
    in every epoch it reports, once (an errored episode counts as a scored failure). A
    method that picks one run per (task, trial) (``Method.scoring`` ``pick``: one row per
    (task, trial), whichever agent it picked) needs every (task, trial) once; a method
    scored per agent, every agent × trial on every task (:func:`_cells_missing`). A
    contaminated condition ``method+condition`` is scored as its method. A missing task
    would leave the denominator silently; a task counted twice would weigh double."""
    from edv_ray.report.method_facts import methods

    cfg = _config(run_dir)
    selected = con.execute("SELECT count(*) FROM selection WHERE selection = 'test'").fetchone()[0]
    if not selected or cfg is None:
        return []
    labels = set(cfg.method_names()) | {m for (m,) in con.execute(
        "SELECT DISTINCT method FROM method_results").fetchall()}
    out = []
    for method in sorted(labels):
        epochs = con.execute("SELECT DISTINCT epoch FROM method_results WHERE method = ?",
                             [method]).fetchall() or [(None,)]
        for (epoch,) in sorted(epochs, key=lambda e: -1 if e[0] is None else e[0]):
            args = [method, epoch]
            got, rows, agents = con.execute(
                "SELECT count(DISTINCT (domain, task_id)), count(*), count(DISTINCT agent) "
                "FROM method_results WHERE method = ? AND epoch IS NOT DISTINCT FROM ?", args).fetchone()
            missing = [m for (m,) in con.execute(
                "SELECT domain || '/' || task_id FROM selection s WHERE selection = 'test' "
                "AND NOT EXISTS (SELECT 1 FROM method_results m WHERE m.method = ? "
                "AND m.epoch IS NOT DISTINCT FROM ? AND m.domain = s.domain "
                "AND m.task_id = s.task_id) ORDER BY 1", args).fetchall()]
            twice = con.execute(
                "SELECT count(*) FROM (SELECT 1 FROM method_results WHERE method = ? AND epoch "
                "IS NOT DISTINCT FROM ? GROUP BY agent, domain, task_id, trial HAVING count(*) > 1)",
                args).fetchone()[0]
            declared = methods().get(method.split("+", 1)[0])
            picking = declared is not None and declared.scoring == PICK
            gaps, doubled = _cells_missing(con, args, agents, picking)
            cell = "(task, trial)" if picking else "(task, agent, trial)"
            where = "" if epoch is None else f" (epoch {epoch})"
            why = "; ".join(x for x in (
                f"{len(missing)} not scored, e.g. {', '.join(missing[:3])}" if missing else "",
                f"{twice} (agent, task, trial) counted more than once" if twice else "",
                f"{doubled} (task, trial) with more than one picked result" if doubled else "",
                f"{gaps} {cell} cell(s) of a scored task without a result" if gaps else "") if x)
            out.append(Check(
                "tasks_scored", not why, f"{got}/{selected} tasks, {rows} rows{where}",
                why or ("every selected test task has one picked result per trial"
                        if picking else "every selected test task has one result per agent and "
                        "trial") + " (errors count as failures)", method))
    return out


def _cells_missing(con, args: list, agents: int, picking: bool) -> tuple[int, int]:
    """(missing cells, cells held more than once) of one method × epoch. Picking: one row
    per (task, trial), whichever agent; each scored task must hold every trial 0…max.
    Else scored per agent: each scored task must hold every one of the method's agents on
    every trial (a doubled (agent, task, trial) is counted by the caller)."""
    doubled, trials, cells, agent_cells, tasks = con.execute("""
        WITH m AS (SELECT * FROM method_results WHERE method = ? AND epoch IS NOT DISTINCT FROM ?)
        SELECT (SELECT count(*) FROM (SELECT 1 FROM m GROUP BY domain, task_id, trial
                                      HAVING count(*) > 1)),
               coalesce(max(trial), -1) + 1, count(DISTINCT (domain, task_id, trial)),
               count(DISTINCT (agent, domain, task_id, trial)) FILTER (WHERE agent IS NOT NULL),
               count(DISTINCT (domain, task_id))
        FROM m""", args).fetchone()
    if picking:
        return tasks * trials - cells, doubled
    return tasks * trials * agents - agent_cells, 0


@check
def shared_episodes(con, run_dir) -> list[Check]:
    """Episodes two methods share: allowed only when provably the same episode (same
    stage, epoch, task, trial, agent — hence seed — and the same memory: none)."""
    rows = con.execute("""
        WITH u AS (SELECT DISTINCT method, episode_id, stage, epoch, memory_key FROM uses)
        SELECT list(DISTINCT method ORDER BY method) AS methods, stage, epoch,
               count(DISTINCT episode_id) AS n,
               count(DISTINCT episode_id) FILTER (WHERE memory_key IS NOT NULL) AS with_memory
        FROM u WHERE episode_id IN (
            SELECT episode_id FROM u GROUP BY episode_id HAVING count(DISTINCT method) > 1)
        GROUP BY stage, epoch ORDER BY stage, epoch
    """).fetchall()
    return [Check("shared_episodes", with_mem == 0,
                  f"{n} {stage} e{epoch} episode(s) shared by {', '.join(methods)}",
                  "same agent, task, trial, seed and stage, no memory: run once, charged in full "
                  "to each method" if with_mem == 0 else
                  f"{with_mem} shared episode(s) were given memory", "")
            for methods, stage, epoch, n, with_mem in rows]


@check
def method_checks(con, run_dir) -> list[Check]:
    """The checks each method of the run declares (``Method.validity_checks``), over its
    own section; a check that crashes is a failed check named after it."""
    from edv_ray.report.method_facts import methods

    cfg = _config(run_dir)
    out = []
    for name in cfg.method_names() if cfg is not None else []:
        for fn in methods()[name].validity_checks:
            try:
                out += [Check(**{"method": name, **row}) for row in fn(con, run_dir, cfg.section(name), name)]
            except Exception as err:  # noqa: BLE001 - a broken check must show, not pass
                out.append(Check(getattr(fn, "__name__", "check"), False, "-",
                                 f"check crashed: {type(err).__name__}: {err}", name))
    return out


@check
def seed_diversity(con, run_dir) -> list[Check]:
    """Agents that differ only by their sampling seed must send different requests: the
    first call of each (stage, task, trial) is fingerprinted, per agent."""
    cfg = _config(run_dir)
    if cfg is None:
        return []
    groups: dict[tuple, list] = {}
    for a in cfg.agents:
        key = (a.model, a.prompt_strategy, a.sampling.model_dump_json(exclude={"seed"}))
        groups.setdefault(key, []).append(a)
    out = []
    for agents in groups.values():
        seeds = {a.sampling.seed for a in agents}
        if len(agents) < 2 or len(seeds) < len(agents):
            continue
        names = [a.name for a in agents]
        rows = con.execute("""
            WITH first AS (
                SELECT c.agent, e.stage, e.epoch, e.domain, e.task_id, e.trial, c.request_hash
                FROM llm_calls c JOIN episodes e USING (episode_id)
                WHERE c.role = 'agent' AND c.agent IN (SELECT unnest(?::VARCHAR[]))
                QUALIFY row_number() OVER (PARTITION BY c.episode_id ORDER BY c.started_at) = 1
            )
            SELECT count(*) AS pairs,
                   count(*) FILTER (WHERE n_hash < n_agent) AS collapsed
            FROM (SELECT stage, epoch, domain, task_id, trial, count(DISTINCT agent) AS n_agent,
                         count(DISTINCT request_hash) AS n_hash
                  FROM first GROUP BY ALL HAVING count(DISTINCT agent) > 1)
        """, [names]).fetchone()
        pairs, collapsed = rows
        if not pairs:
            continue
        out.append(Check(
            "seed_diversity", collapsed == 0,
            f"{pairs - collapsed}/{pairs} shared tasks with distinct first requests "
            f"({', '.join(f'{a.name}={a.sampling.seed}' for a in agents)})",
            "agents differing only by seed sent different requests" if collapsed == 0 else
            "agents configured with different seeds sent identical requests (seeds overridden)"))
    return out


@check
def contamination_share(con, run_dir) -> list[Check]:
    """Each contaminated condition reached the share asked (± one item per domain) and
    its poison was retrieved only by tasks of its own domain."""
    rows = con.execute("SELECT method, condition, domain || coalesce(' (' || owner || ')', ''), "
                       "share_asked, n_clean, n_poison, share_reached FROM contamination_share"
                       ).fetchall()
    cross = dict(con.execute("SELECT method, retrieved_other_domain_poison FROM contamination_use"
                             ).fetchall())
    retrieved = dict(con.execute("SELECT method, retrieved_poison FROM contamination_use").fetchall())
    out = []
    for method, cond, domain, asked, n_clean, n_poison, reached in rows:
        label = f"{method}+{cond}"
        off = abs(n_poison - asked * (n_clean + n_poison))
        bad_cross = cross.get(label, 0) or 0
        why = "; ".join(x for x in (
            f"{off:.1f} item(s) off the share" if off > 1.0 else "",
            f"{bad_cross} episode(s) retrieved another domain's poison" if bad_cross else "",
            "no episode of the condition retrieved any poison (it measured nothing)"
            if retrieved.get(label, 1) == 0 else "") if x)
        out.append(Check(
            "contamination_share", not why,
            f"{domain}: {n_poison}/{n_clean + n_poison} items = {reached:.3f} (asked {asked:g}); "
            f"{retrieved.get(label, 0)} episode(s) retrieved poison",
            why or "within one item of the share asked; poison retrieved, only in its own domain",
            label))
    return out


@check
def reward_use(con, run_dir) -> list[Check]:
    """Where each method learns from the benchmark's reward (``reward_use`` rows: the
    method's own declaration for its section, ``Method.reward_use``; the reports show them
    as their own table). That no stage ran with a reward its config hides is each
    method's own check (EDV's ``reward_visibility``)."""
    from edv_ray.methods.registry import reward_use

    cfg = _config(run_dir)
    if cfg is None:
        return []
    return [Check("reward_use", True, reward_use(cfg, name),
                  "where the method learns from the benchmark's reward", name)
            for name in cfg.method_names()]


@check
def task_types_seen(con, run_dir) -> list[Check]:
    """Routing on task types training never saw falls back to the domain or the prior:
    report the share of test tasks whose type the routing matrix has measured."""
    rows = con.execute("""
        WITH m AS (SELECT DISTINCT method, key FROM routing_matrix r
                   WHERE level = 'task_type' AND attempts > 0
                     AND epoch = (SELECT max(epoch) FROM routing_matrix WHERE method = r.method))
        SELECT r.method, count(*) AS tasks,
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM m WHERE m.method = r.method
                                              AND m.key = r.task_type)) AS seen,
               count(DISTINCT r.task_type) AS types
        FROM routing r WHERE r.basis <> 'fixed'
          AND r.epoch = (SELECT max(epoch) FROM routing WHERE method = r.method)
        GROUP BY r.method ORDER BY r.method
    """).fetchall()
    return [Check("task_types_seen", tasks == 0 or seen >= MIN_SEEN * tasks,
                  f"{seen}/{tasks} test tasks of a type training measured ({types} type(s))",
                  "routing used measured cells" if seen == tasks else
                  f"{tasks - seen} task(s) routed by their domain's row or the prior"
                  + ("" if seen >= MIN_SEEN * tasks else
                     f" — under {MIN_SEEN:.0%}: the task-type key routes mostly blind"), method)
            for method, tasks, seen, types in rows]


MIN_SEEN = 0.5  # below this share of test tasks with a measured type, routing is mostly blind
