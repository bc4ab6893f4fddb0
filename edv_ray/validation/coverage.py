"""Check 6: do ``edv compare``'s 95 % intervals cover the planted truth 93-97 % of the time?

Two sources of repetitions:

* **planted outcome tables** (fast and full): each repetition draws fresh tasks from a
  planted population (task difficulty u ~ Beta(½, ½) in two domains; method A solves a
  trial with probability u, method B with u + δ(1 − u)) and their trials, writes the
  rows a run's ``method_results`` holds, and hands all repetitions — one "run" each —
  to ``edv compare``'s own code on one DuckDB connection (:class:`Scored` cells and
  :func:`compare_cells` paired comparisons). The truth is the population's: A 0.5,
  B 0.5 + δ/2, B − A δ/2. Whole runs are not needed here: the intervals see only these
  tables, and thousands of repetitions cost seconds instead of hours on 2 cores.
* **the framework's own result tables** (full): one simulated run whose many agents all
  have the same planted P(success) — each agent a repetition — read through the same
  compare cells (No-Memory's per-agent rows: tasks × trials, task-clustered).
"""

from __future__ import annotations

from math import comb

import duckdb
import numpy as np
import pyarrow as pa

from edv_ray.report.compare_load import RUN_INFO_SCHEMA
from edv_ray.report.compare_tables import compare_cells
from edv_ray.report.compare_units import ALL, Scored
from edv_ray.report.stats import clustered_rate, wilson
from edv_ray.validation.checks import Row, level, num

BAND = (0.93, 0.97)
DOMAINS = ("d1", "d2")
# the planted tables' design: heterogeneous tasks (Beta(0.5, 0.5), intra-task correlation
# 1/2) and 6 trials each, where an interval that ignores the clustering of a task's
# episodes covers ~0.75 instead of 0.95 (a mild Beta(2, 2) × 2 trials let it pass at 0.947)
KAPPA = 1.0
TRIALS = 6


def planted_tables(reps: int, tasks: int, trials: int, delta: float, seed: int = 0,
                   kappa: float = KAPPA) -> pa.Table:
    """method_results rows of ``reps`` repetitions (run ids r0000, …): ``tasks`` per
    domain, ``trials`` per task, methods ``no_memory`` (A) and ``edv`` (B); task
    difficulty u ~ Beta(κ/2, κ/2) (mean 0.5; κ = 1: strongly heterogeneous tasks)."""
    rng = np.random.default_rng(seed)
    nd = len(DOMAINS)
    u = rng.beta(kappa / 2, kappa / 2, (reps, nd, tasks))
    p = np.stack([u, u + delta * (1 - u)], axis=2)  # (rep, domain, method, task)
    wins = rng.random((reps, nd, 2, tasks, trials)) < p[..., None]
    r, d, m, t, k = (a.ravel() for a in np.indices(wins.shape))
    ok = wins.ravel()
    methods = np.array(["no_memory", "edv"])[m]
    run = np.char.add("r", np.char.zfill(r.astype(str), 4))
    dom = np.array(DOMAINS)[d]
    tid = np.char.add("t", t.astype(str))
    eid = [f"r{a}-{b}-{c}-{e}-{f}" for a, b, c, e, f in zip(r, methods, dom, t, k)]
    return pa.table({"run_id": run, "method": methods, "agent": np.full(len(ok), "x"),
                     "epoch": np.zeros(len(ok), dtype=np.int64), "domain": dom, "task_id": tid,
                     "trial": k.astype(np.int64), "status": np.full(len(ok), "ok"), "success": ok,
                     "reward": ok.astype(float), "episode_id": eid})


def compare_con(results: pa.Table) -> duckdb.DuckDBPyConnection:
    """A connection with the two views compare's cells read (method_results, run_info)."""
    con = duckdb.connect()
    con.register("_method_results", results)
    con.table("_method_results").create_view("method_results")
    runs = sorted(set(results.column("run_id").to_pylist()))
    con.register("_run_info", pa.Table.from_pylist(
        [{"run_id": r, "stored_run_id": r, "sweep_id": None, "axes_json": "{}", "benchmark": "tau2",
          "seed": 0} for r in runs], schema=RUN_INFO_SCHEMA))
    con.table("_run_info").create_view("run_info")
    return con


def coverage_row(check: str, hits: int, reps: int, truth_text: str, detail: str) -> Row:
    """PASS when the observed coverage is consistent with the accepted band: its interval
    at the suite's level meets 0.93–0.97 (with 200 repetitions the observed share alone
    moves ±0.03 around a true 0.95: a point rule would fail a correct interval about one
    time in five). PASS* when the share itself lies outside the band."""
    cov, cov_fw = wilson(hits, reps), wilson(hits, reps, level())
    inside = BAND[0] <= hits / reps <= BAND[1]
    ok = cov_fw.lo <= BAND[1] and cov_fw.hi >= BAND[0]
    return Row(check, f"0.95 (accept {BAND[0]:.2f}–{BAND[1]:.2f})",
               f"{hits / reps:.3f} [{num(cov.lo)}, {num(cov.hi)}] of {reps} reps", ok,
               f"truth {truth_text}; {detail}", {"hits": hits, "reps": reps, "coverage": hits / reps,
                                                 "fw_lo": cov_fw.lo, "fw_hi": cov_fw.hi},
               not inside)


EXACT_SPLITS = 20_000  # 6d gives the exact coverage while its design has no more splits


def exact_cell_coverage(p: float, tasks: int, trials: int, kappa: float | None = None) -> float:
    """The exact probability that the task-clustered interval of a cell of ``tasks`` ×
    ``trials`` episodes covers ``p`` (every split of the tasks by their number of
    successes, weighted by its multinomial probability). A task's successes are
    Binomial(trials, p), or with ``kappa`` (the profile's ``task_spread``: each task's rate
    ~ Beta(pκ, (1 − p)κ)) beta-binomial."""
    from itertools import combinations_with_replacement
    from math import factorial, prod

    from scipy.stats import betabinom, binom

    per = (binom.pmf(range(trials + 1), trials, p) if kappa is None
           else betabinom.pmf(range(trials + 1), trials, p * kappa, (1 - p) * kappa))
    total = 0.0
    for succ in combinations_with_replacement(range(trials + 1), tasks):
        counts = [succ.count(k) for k in range(trials + 1)]
        weight = factorial(tasks) / prod(factorial(c) for c in counts) * prod(
            float(q) ** c for q, c in zip(per, counts))
        r = clustered_rate(list(succ), [trials] * tasks)
        total += weight * (r.lo <= p <= r.hi)
    return total


def planted_coverage(reps: int, tasks: int = 20, trials: int = TRIALS, delta: float = 0.2,
                     n_boot: int = 2000, seed: int = 0) -> list[Row]:
    s = Scored(compare_con(planted_tables(reps, tasks, trials, delta, seed)))
    truth = {"no_memory": 0.5, "edv": 0.5 + delta / 2}
    hits = {"no_memory": 0, "edv": 0, "diff": 0, "domain": 0}
    for g in s.groups:
        for m in ("no_memory", "edv"):
            c = s.cell(g.label, m)
            hits[m] += c["ci_lo"] <= truth[m] <= c["ci_hi"]
        c = s.cell(g.label, "edv", ALL, DOMAINS[0])
        hits["domain"] += c["ci_lo"] <= truth["edv"] <= c["ci_hi"]
        d = compare_cells(s, (g.label, "edv", ALL), (g.label, "no_memory", ALL), ALL, n_boot, 0)
        hits["diff"] += d.lo is not None and d.lo <= delta / 2 <= d.hi
    shape = f"{len(DOMAINS)} domains × {tasks} tasks × {trials} trials per repetition"
    return [
        coverage_row("6a coverage: Pass@1 cell, mean of domain scores (planted tables)",
                     hits["no_memory"], reps, "0.500", f"method A; {shape}; task-clustered"),
        coverage_row("6b coverage: Pass@1 cell of one domain (planted tables)", hits["domain"], reps,
                     f"{truth['edv']:.3f}", f"method B, {tasks} tasks × {trials} trials; task-clustered"),
        coverage_row("6c coverage: paired difference B − A (planted tables)", hits["diff"], reps,
                     f"{delta / 2:+.3f}", f"{shape}; paired cluster-robust t, "
                     "tasks within domains"),
    ]


def framework_coverage(run, ex) -> Row:
    """No-Memory's per-agent cells of a run whose agents all share one planted rate (with
    ``task_spread``, its mean over tasks; ``per: agent`` keeps the agents' cells
    independent repetitions)."""
    agents, domain = ex.executors, ex.domains[0]  # the design's, not the run's
    hits, shape, exact, c = 0, "", "", None
    p = ex.p(agents[0], domain)
    spread = ex.o.profile.task_spread
    if spread is not None and spread.per != "agent":
        raise ValueError("check 6d takes each agent as a repetition: task_spread must be per agent")
    kappa = None if spread is None else spread.concentration
    for a in agents:
        c = run.cell("no_memory", domain, agent=a)
        hits += c.lo <= ex.p(a, domain) <= c.hi
        shape = f"{c.tasks} tasks, n = {c.n} each"
    if (c is not None and c.tasks and c.n % c.tasks == 0
            and comb(c.tasks + c.n // c.tasks, c.tasks) <= EXACT_SPLITS):
        exact = (f"; exact coverage of this interval at {c.tasks} × {c.n // c.tasks}"
                 + ("" if kappa is None else f", task rates ~ Beta({p * kappa:g}, {(1 - p) * kappa:g})")
                 + f": {exact_cell_coverage(p, c.tasks, c.n // c.tasks, kappa):.3f}")
    return coverage_row("6d coverage: per-agent Pass@1 cells of a simulated run (framework tables)",
                        hits, len(agents), num(p),
                        f"{len(agents)} agents as repetitions, {shape}; task-clustered{exact}")
