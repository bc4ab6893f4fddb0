"""The token tables of ``edv compare``, on the SAME scope as the Pass@1 tables.

Scope, per (run, method), for the epoch scope E of the Pass@1 tables (``last`` = the
method's last scored epoch in that run; an int; None = every epoch):

* inference tokens: the ``token_use`` rows of epoch E (every epoch for None);
* construction tokens: everything that built the memory E was scored with — all of the
  method's construction at its last epoch (and for None), else epochs ≤ E;
* denominators: the test tasks scored in that scope — one unit per (task, trial[, epoch])
  however many agents ran it — and the solved ones: a unit's mean success over its
  episodes (for a per-agent method the mean over agents; errors are failures).

So "per test task" is the cost of the method producing one scored test result, the same
unit for every method; the episodes behind one unit (1 routed solve, or one per agent)
are stated beside it, with the figure per episode. An episode two methods share (the
``uses`` table lists it under both) is charged IN FULL to each (``token_use.shared``);
the shared part is shown. The user simulator is counted apart.
"""

from __future__ import annotations

from collections import defaultdict

from edv_ray.report.compare_units import ALL, Scored, order_methods, scored_sql
from edv_ray.report.method_facts import baselines
USER_SIM_ROLES = ("user_sim",)
PHASES = ("construction", "inference")


def last_epochs(con) -> dict[tuple[str, str], int | None]:
    return {(r, m): e for r, m, e in con.execute(
        "SELECT run_id, method, max(epoch) FROM method_results GROUP BY ALL").fetchall()}


def in_scope(phase: str, epoch, scope, last) -> bool:
    """Whether a token row (or a used episode) of ``phase`` and ``epoch`` belongs to the
    scope's Pass@1 (see the module doc). ``scope``: the epoch scored (None = all);
    ``last``: the method's last scored epoch in the run."""
    if scope is None:
        return True
    if phase == "inference":
        return epoch == scope
    return scope == last or epoch is None or (epoch is not None and epoch <= scope)


def test_units(con, epoch) -> dict[tuple[str, str], dict]:
    """(run, method) → test units (task × trial [× epoch]), episodes and solved units in the
    Pass@1 scope."""
    sql, params = scored_sql(epoch)
    cur = con.execute(f"""
        SELECT run_id, method, count(*) AS units, sum(n) AS episodes, sum(c / n) AS solved
        FROM (SELECT run_id, method, domain, task_id, trial, epoch, count(*) AS n,
                     count(*) FILTER (WHERE solved) AS c FROM ({sql}) s GROUP BY ALL)
        GROUP BY ALL""", params)
    return {(r, m): {"units": u, "episodes": e, "solved": float(s)} for r, m, u, e, s in cur.fetchall()}


def _scope_of(s: Scored, last: dict, run: str, method: str):
    return last.get((run, method)) if s.epoch == "last" else s.epoch


def _token_rows(con) -> list[dict]:
    cur = con.execute("""
        SELECT run_id, method, phase, stage, epoch, role, coalesce(shared, false) AS shared,
               coalesce(sum(calls), 0) AS calls,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens
        FROM token_use GROUP BY ALL""")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def unscoped_runs(con) -> list[str]:
    """Runs whose token rows carry no epoch (older views): their tokens cannot be scoped."""
    return [r for (r,) in con.execute(
        "SELECT run_id FROM token_use GROUP BY run_id HAVING count(epoch) = 0").fetchall()]


def _uses(con, s: Scored, last: dict) -> dict[tuple[str, str], list[int]]:
    """(group, method) → [episodes used in scope, of which shared with another method].
    A stage's phase comes from the method's token rows (a stage without calls: inference)."""
    phases = dict(((m, st), ph) for m, st, ph in con.execute(
        "SELECT DISTINCT method, stage, phase FROM token_use").fetchall())
    rows = con.execute("""
        SELECT u.run_id, u.method, u.stage, u.epoch, u.episode_id,
               count(*) OVER (PARTITION BY u.run_id, u.stage, u.episode_id) > 1 AS shared
        FROM (SELECT DISTINCT run_id, method, stage, epoch, episode_id FROM uses) u""").fetchall()
    group_of = {r: g.label for g in s.groups for r in g.runs}
    out = defaultdict(lambda: [0, 0])
    for run, method, stage, epoch, _, shared in rows:
        phase = phases.get((method, stage), "inference")
        if run in group_of and in_scope(phase, epoch, _scope_of(s, last, run, method),
                                        last.get((run, method))):
            out[(group_of[run], method)][0] += 1
            out[(group_of[run], method)][1] += int(shared)
    return out


def _div(a, b):
    return float(a) / float(b) if a is not None and b else None


def token_tables(con, s: Scored) -> dict[str, list[dict]]:
    """``tokens`` (per group and method: construction / inference / user-sim tokens in the
    Pass@1 scope, per test task, per solved test task, per episode, the shared part, the
    ratio to ReasoningBank of the same group), ``tokens_by_role`` (phase × stage × role)
    and ``tokens_per_item`` (construction tokens per admitted experience)."""
    last = last_epochs(con)
    units = test_units(con, s.epoch)
    group_of = {r: g.label for g in s.groups for r in g.runs}
    sims = set(USER_SIM_ROLES)
    unscoped = frozenset(unscoped_runs(con))  # no epoch on their token rows: all of them
    by_role: dict[tuple, dict] = {}
    for r in _token_rows(con):
        if r["run_id"] not in group_of or (r["run_id"], r["method"]) not in last:
            continue  # a method with no scored result in these runs: no token claims
        if not in_scope(r["phase"], r["epoch"], _scope_of(s, last, r["run_id"], r["method"]),
                        last[(r["run_id"], r["method"])]) and r["run_id"] not in unscoped:
            continue
        key = (group_of[r["run_id"]], r["method"], r["phase"], r["stage"], r["role"], r["shared"])
        a = by_role.setdefault(key, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        for f in a:
            a[f] += int(r[f])
    den = defaultdict(lambda: {"units": 0, "episodes": 0, "solved": 0.0})
    for (run, method), u in units.items():
        if run in group_of:
            for f in u:
                den[(group_of[run], method)][f] += u[f]
    order = {m: i for i, m in enumerate(order_methods({k[1] for k in by_role}))}
    role_rows = []
    for (g, m, phase, stage, role, shared), a in sorted(by_role.items(), key=lambda kv: (
            kv[0][0], order[kv[0][1]], kv[0][2] != "construction", str(kv[0][3]), str(kv[0][4]))):
        tokens = a["prompt_tokens"] + a["completion_tokens"]
        role_rows.append({"group": g, "method": m, "phase": phase, "stage": stage, "role": role,
                          "user_sim": role in sims, "shared": bool(shared), **a, "tokens": tokens,
                          "per_test_task": _div(tokens, den[(g, m)]["units"])})
    uses = _uses(con, s, last)
    summary = []
    for g in s.groups:
        for m in sorted({r["method"] for r in role_rows if r["group"] == g.label}, key=order.get):
            rs = [r for r in role_rows if r["group"] == g.label and r["method"] == m]
            d = den[(g.label, m)]

            def tot(phase=None, sim=False, shared=None, rs=rs):
                return sum(r["tokens"] for r in rs if r["user_sim"] == sim
                           and (phase is None or r["phase"] == phase)
                           and (shared is None or r["shared"] == shared))

            row = {"group": g.label, "method": m, "test_tasks": d["units"],
                   "episodes": d["episodes"], "solved": d["solved"],
                   "episodes_per_task": _div(d["episodes"], d["units"]),
                   "construction_tokens": tot("construction"), "inference_tokens": tot("inference"),
                   "user_sim_tokens": tot(None, True), "shared_tokens": tot(None, False, True),
                   "episodes_used": uses.get((g.label, m), [None, None])[0],
                   "episodes_shared": uses.get((g.label, m), [None, None])[1]}
            total = row["construction_tokens"] + row["inference_tokens"]
            for p in PHASES:
                row[f"{p}_per_test_task"] = _div(row[f"{p}_tokens"], d["units"])
            row.update(total_per_test_task=_div(total, d["units"]),
                       total_per_solved_task=_div(total, d["solved"]),
                       inference_per_episode=_div(row["inference_tokens"], d["episodes"]))
            summary.append(row)
    ref = baselines()[:1]  # the ``*_ratio_to_rb`` columns: to the preferred baseline
    for r in summary:
        rb = next((x for x in summary if x["method"] in ref and x["group"] == r["group"]), None)
        for f in ("construction", "inference", "total"):
            r[f"{f}_ratio_to_rb"] = _div(r[f"{f}_per_test_task"], rb[f"{f}_per_test_task"]) if rb else None
    return {"tokens": summary, "tokens_by_role": role_rows,
            "tokens_per_item": per_item(con, s, summary)}


def per_item(con, s: Scored, summary: list[dict]) -> list[dict]:
    """Construction tokens (in scope) per admitted experience, per group, method and bank."""
    group_of = {r: g.label for g in s.groups for r in g.runs}
    acc = defaultdict(int)
    for run, method, bank, items in con.execute(
            "SELECT run_id, method, bank, coalesce(sum(items), 0) FROM admitted "
            "WHERE method IS NOT NULL GROUP BY ALL").fetchall():
        if run in group_of:
            acc[(group_of[run], method, bank)] += int(items)
    out = []
    for row in summary:
        banks = sorted((b, i) for (g, m, b), i in acc.items()
                       if g == row["group"] and m == row["method"])
        if len(banks) > 1:
            banks.append((ALL, sum(i for _, i in banks)))
        for bank, items in banks:
            out.append({"group": row["group"], "method": row["method"], "bank": bank,
                        "items": items, "construction_tokens": row["construction_tokens"],
                        "tokens_per_item": _div(row["construction_tokens"], items)})
    return out
