"""Method rates and task heterogeneity measured in a pilot run folder, for ``edv power``.

Rates: ``method_results`` at each method's last epoch (``edv compare``'s scope; an
errored episode is a failure), per method × task type (the run's ``selection``) × agent:
the agent's successes / episodes, its arm weight its share of the method's episodes of
that type (Router / EDV: the routed agents; Judge: the picked agents; the per-model
methods: each pool model).

Heterogeneity (the latent model of :mod:`edv_ray.power.model`), by moments: over all
pairs of distinct episodes of one task, the model gives P(both succeed) =
Φ₂(Φ⁻¹(p_i), Φ⁻¹(p_j); r), r = ρ for two agents and ρ + τ for one agent, p each
episode's cell rate. ρ solves "expected = observed joint successes" over the pairs of
different agents, ρ + τ over the pairs of the same agent (each clipped to [0, 0.95]).
An episode two methods share (No-Memory's and Judge's pool runs) counts once. Cell
rates are clipped to [½/n, 1 − ½/n].
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy.special import ndtri
from scipy.stats import multivariate_normal

from edv_ray.config import ConfigError
from edv_ray.power.model import Arm, Design, Heterogeneity, Method

MAX_ICC = 0.95

_ROWS = """
SELECT r.method, r.agent, r.domain, r.task_id, r.trial, r.episode_id, r.solved,
       coalesce(s.task_type, r.domain) AS task_type
FROM ({scored}) r
LEFT JOIN (SELECT DISTINCT domain, task_id, task_type FROM selection
           WHERE selection = 'test') s
  ON s.domain = r.domain AND s.task_id = r.task_id
"""


def read_pilot(run_dir: str | Path) -> tuple[list[Method], Design, list[tuple]]:
    """(methods, the pilot's design, its episode rows) from a run folder."""
    from edv_ray.report.compare_units import scored_sql
    from edv_ray.results.views import connect

    run_dir = Path(run_dir)
    if not (run_dir / "episodes").is_dir():
        raise ConfigError(f"{run_dir} has no episodes/ folder: not a run folder")
    con = connect(run_dir)
    sql, params = scored_sql("last")
    rows = con.execute(_ROWS.format(scored=sql), params).fetchall()
    tests = con.execute("SELECT DISTINCT domain, task_id, task_type FROM selection "
                        "WHERE selection = 'test' ORDER BY domain, task_id").fetchall()
    con.close()
    if not rows:
        raise ConfigError(f"{run_dir}: no method scored a test task (method_results is empty)")
    cells: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for method, agent, _d, _t, _tr, _e, solved, ttype in rows:
        c = cells[(method, ttype)][str(agent)]
        c[0] += 1
        c[1] += bool(solved)
    methods = {}
    for (method, ttype), agents in sorted(cells.items()):
        n = sum(v[0] for v in agents.values())
        methods.setdefault(method, {})[ttype] = tuple(
            Arm(a, s / m, m / n) for a, (m, s) in sorted(agents.items()))
    seen = {(d, t) for _m, _a, d, t, *_ in rows}
    tasks = [(d, k) for d, t, k in tests if (d, t) in seen] or sorted(
        {(d, k) for _m, _a, d, _t, _tr, _e, _s, k in rows})
    trials = 1 + max(int(r[4] or 0) for r in rows)
    return [Method(m, arms) for m, arms in methods.items()], Design(tuple(tasks), trials), rows


def estimate_heterogeneity(rows: list[tuple]) -> Heterogeneity:
    """ρ and τ by the pair moments above; a part with no pairs is 0 (and said so)."""
    cell_n: dict = defaultdict(lambda: [0, 0])
    by_task: dict = defaultdict(dict)
    for method, agent, d, t, _tr, eid, solved, ttype in rows:
        cell = (method, str(agent), ttype)
        if eid in by_task[(d, t)]:
            continue  # an episode two methods share counts once
        by_task[(d, t)][eid] = (cell, bool(solved))
        cell_n[cell][0] += 1
        cell_n[cell][1] += bool(solved)
    thr = {c: float(ndtri(min(max(s / n, 0.5 / n), 1 - 0.5 / n))) for c, (n, s) in cell_n.items()}
    # pairs grouped by (cell, cell): how many, how many both solved
    pairs: dict = defaultdict(lambda: [0, 0])
    for eps in by_task.values():
        per: dict = defaultdict(lambda: [0, 0])
        for cell, ok in eps.values():
            per[cell][0] += 1
            per[cell][1] += ok
        cells = sorted(per)
        for i, ci in enumerate(cells):
            ni, si = per[ci]
            acc = pairs[(ci, ci)]
            acc[0] += ni * (ni - 1) // 2
            acc[1] += si * (si - 1) // 2
            for cj in cells[i + 1:]:
                nj, sj = per[cj]
                acc = pairs[(ci, cj)]
                acc[0] += ni * nj
                acc[1] += si * sj
    same = {k: v for k, v in pairs.items() if k[0][1] == k[1][1] and v[0]}
    diff = {k: v for k, v in pairs.items() if k[0][1] != k[1][1] and v[0]}
    rho, n_diff = _solve(diff, thr)
    total, n_same = _solve(same, thr)
    tau = max(0.0, total - rho) if n_same else 0.0
    tau = min(tau, MAX_ICC - rho)
    parts = [f"ρ from {n_diff:,} pairs of episodes by different agents on one task"
             if n_diff else "ρ = 0: no task has episodes by two agents",
             f"ρ + τ from {n_same:,} pairs by the same agent" if n_same
             else "τ = 0: no task has two episodes by one agent"]
    return Heterogeneity(rho, tau, "estimated from the pilot (" + "; ".join(parts) + ")")


def _solve(pairs: dict, thr: dict) -> tuple[float, int]:
    """The latent correlation r at which Σ pairs·Φ₂(a_i, a_j; r) = Σ both-solved."""
    if not pairs:
        return 0.0, 0
    keys = list(pairs)
    n = np.array([pairs[k][0] for k in keys], dtype=float)
    observed = float(sum(pairs[k][1] for k in keys))
    pts = np.array([[thr[a], thr[b]] for a, b in keys])

    def gap(r: float) -> float:
        cdf = multivariate_normal(mean=[0, 0], cov=[[1, r], [r, 1]]).cdf(pts)
        return float((n * np.atleast_1d(cdf)).sum()) - observed

    if gap(0.0) >= 0:
        return 0.0, int(n.sum())
    if gap(MAX_ICC) <= 0:
        return MAX_ICC, int(n.sum())
    return float(optimize.brentq(gap, 0.0, MAX_ICC, xtol=1e-4)), int(n.sum())
