"""The statistics of ``edv compare`` (and of ``edv power``): one function per quantity, each
stating what it assumes about the episodes it is given.

Rates (one cell of a table):
- :func:`wilson` — successes out of n independent episodes (one episode per task).
- :func:`clustered_rate` — THE interval of every cell: episodes grouped by task (trials,
  agents, epochs or runs of the same task are not independent); it is :func:`wilson`
  exactly when every task has one episode.
- :func:`pass_hat_k` — τ²-bench's pass^k over tasks.

Paired comparisons (two methods over the same tasks):
- :func:`paired_t` — the difference and its cluster-robust t interval (the one compare
  prints); :func:`paired_bootstrap` — the percentile bootstrap (kept for comparison).
- :func:`sign_flip_test` — the exact two-sided test of "no difference" (exact McNemar when
  each task has one episode per method).
- :func:`detectable_difference` — the smallest difference this many tasks detect with 80 %
  power (two-sided 5 %), for reading a null result.
- :func:`paired_comparison` — all three together, with the "too few tasks" rule.
- :mod:`edv_ray.report.stats_planning` — the same power calculation before any data
  (for planning an experiment).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import stats as sps

from edv_ray.report import edge_tail
from edv_ray.report.stats_planning import solve_detectable

MIN_PAIRED_TASKS = 20  # below: no interval ("too few tasks"); the exact test is still given
MIN_DIFFERING_TASKS = 5  # below: no interval ("too few tasks differ")
EXACT_GRID = 50_000_000  # the sign-flip test is exact while tasks × integer range stay below
MC_FLIPS = 200_000  # else: seeded Monte Carlo sign flips


def z_value(confidence: float = 0.95) -> float:
    """The two-sided normal quantile for ``confidence`` (1.959964 for 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(sps.norm.ppf(0.5 + confidence / 2.0))


@functools.lru_cache(maxsize=4096)
def _t_ratio(df_tasks: int, df_episodes: int, confidence: float) -> float:
    q = 0.5 + confidence / 2.0
    return float(sps.t.ppf(q, df_tasks) / sps.t.ppf(q, df_episodes))


@dataclass(frozen=True)
class Rate:
    """A rate with its 95 % interval. ``rate`` is None when n is 0 (then lo=0, hi=1).
    ``tasks``: clusters; ``n_eff``: the effective number of independent episodes the
    interval used (= n for :func:`wilson`); ``method``: which interval."""

    successes: int
    n: int
    rate: float | None
    lo: float
    hi: float
    tasks: int = 0
    n_eff: float = 0.0
    method: str = "wilson"


CELL_DF_PER_TASK = 2  # degrees of freedom per informative task of a cell (see effective_df)
PAIRED_DF_PER_TASK = 3  # ... of a paired difference


def effective_df(df: int, informative: int, per_task: int) -> int:
    """The degrees of freedom of a cluster-robust variance, cut to the effective number
    of clusters: min(df, per_task · informative), at least 1. ``informative``: the tasks
    that carry the variance (a cell near 0: the tasks with any success; a paired
    difference: the tasks whose two scores differ). With few such tasks the variance
    estimate rests on them, not on all G (Carter, Schnepel & Steigerwald 2017, "effective
    number of clusters"; MacKinnon & Webb 2017 on few treated clusters). The factors are
    set by the simulation of :mod:`edv_ray.validation.coverage_designs`: a cell's 2 (3 left
    16 tasks at 0.1 with Beta(0.1, 0.9) task rates at 0.90 once the edge tail was spent,
    :mod:`edv_ray.report.edge_tail`), a paired difference's 3 (6 left 16 tasks near 0 / 1
    at 0.86-0.89)."""
    return max(1, min(int(df), int(per_task) * int(informative)))


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # clamp the float dust at the ends (p = 0 and 1 give exactly 0 and 1 in exact arithmetic)
    return (0.0 if p <= 0 else max(0.0, centre - half), 1.0 if p >= 1 else min(1.0, centre + half))


def wilson(successes: int, n: int, confidence: float = 0.95) -> Rate:
    """Wilson score interval: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n).

    Assumes n INDEPENDENT Bernoulli episodes with one common rate — right for one episode
    per task (tasks drawn from the benchmark). Several episodes of the same task (trials,
    agents, epochs, runs) are not independent: use :func:`clustered_rate`."""
    successes, n = int(successes), int(n)
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return Rate(0, 0, None, 0.0, 1.0)
    p = successes / n
    lo, hi = _wilson_bounds(p, n, z_value(confidence))
    return Rate(successes, n, p, lo, hi, n, float(n), "wilson")


def clustered_rate(successes: Sequence[int], episodes: Sequence[int],
                   weights: Sequence[float] | None = None, confidence: float = 0.95) -> Rate:
    """The rate of episodes grouped in clusters (tasks), with a task-clustered interval.

    ``successes[g]`` / ``episodes[g]``: task g's solved and scored episodes (an errored
    episode is a scored failure). ``weights[g]``: the weight of each of task g's episodes
    (default 1; the mean of domain scores gives domain d's episodes 1 / (D · n_d)). The
    estimate is Σ w·y / Σ w.

    Assumptions: tasks are independent draws from the benchmark; episodes of one task
    (its trials, agents, epochs, and the same task in pooled runs or seeds) may be
    correlated in any way. Runs are treated as exchangeable replicates: a run-level
    effect (one seed's memory helping every task) is not a separate variance component.

    Interval: Wilson's at an effective sample size (Kish / Korn–Graubard style).
    V = G/(G−1) · Σ_g (Y_g − p̂·W_g)² / (Σ W_g)² is the cluster-robust (ratio-estimator)
    variance, n_eff = p̂(1−p̂)/V kept between the effective number of tasks (all episodes
    of a task alike) and of episodes (all independent); at p̂ = 0 or 1, where V says
    nothing, n_eff = the effective number of tasks. With more than one episode in some
    task, n_eff is scaled by (t_{n−1} / t_{G−1})² (Korn & Graubard 1998: the variance
    comes from G tasks, not n episodes; few tasks → wider), with the degrees of freedom
    cut to the effective number of clusters when few tasks carry the variance (see
    :func:`effective_df`; Carter, Schnepel & Steigerwald 2017): with 0 < p̂ < 1 the t
    quantile uses min(G − 1, 2·k) degrees of freedom, k = the tasks on the rarer side (with
    a success when p̂ ≤ ½, with a failure otherwise). Without that cut a rate near 0 or 1
    seen through 16 heterogeneous tasks covered only 0.86. The lower bound near 0 (the
    upper near 1, whichever edge p̂ is nearer) spends the tail that cannot occur there
    (:mod:`edv_ray.report.edge_tail`: where "no success at all" is over 2.5 % likely, it
    is the one-sided 95 % bound; equal tails covered 0.974-0.981 with 8-16 tasks near
    0 / 1). With one episode per task and equal weights this IS :func:`wilson`. Simulated
    coverage: 0.939-0.971 in every design of
    :mod:`edv_ray.validation.coverage_designs` (8-100 tasks, μ 0.05-0.95, Beta κ 1-2;
    tests/report/test_stats_coverage.py and test_stats_hard_designs.py check some)."""
    y = np.asarray(successes, dtype=float)
    m = np.asarray(episodes, dtype=float)
    if y.shape != m.shape or (m < 0).any() or (y < 0).any() or (y > m).any():
        raise ValueError("need 0 <= successes <= episodes for every task")
    keep = m > 0
    y, m = y[keep], m[keep]
    w = np.ones_like(m) if weights is None else np.asarray(weights, dtype=float)[keep]
    if (w <= 0).any():
        raise ValueError("weights must be > 0")
    s, n, g = int(y.sum()), int(m.sum()), len(m)
    if n == 0:
        return Rate(0, 0, None, 0.0, 1.0, 0, 0.0, "task-clustered")
    if (m == 1).all() and weights is None:
        r = wilson(s, n, confidence)
        return Rate(s, n, r.rate, r.lo, r.hi, g, float(n), "wilson")
    Y, W = w * y, w * m  # per-task weighted successes and episodes
    p = float(Y.sum() / W.sum())
    n_tasks = float(W.sum() ** 2 / (W ** 2).sum())  # Kish: effective number of tasks
    n_eps = float(W.sum() ** 2 / (w ** 2 * m).sum())  # effective number of episodes
    if (m == 1).all():
        z = z_value(confidence)
    elif g < 2:
        return Rate(s, n, p, 0.0, 1.0, g, 1.0, "task-clustered")
    else:  # Korn & Graubard's degrees-of-freedom adjustment: n_eff · (t_{n−1} / t_{G−1})²
        rare = int((y > 0).sum()) if p <= 0.5 else int((y < m).sum())
        df = g - 1 if p <= 0.0 or p >= 1.0 else effective_df(g - 1, rare, CELL_DF_PER_TASK)
        z = z_value(confidence) * _t_ratio(df, n - 1, confidence)
    var = g / (g - 1) * float(((Y - p * W) ** 2).sum()) / float(W.sum()) ** 2 if g > 1 else 0.0
    if p <= 0.0 or p >= 1.0:
        n_eff = n_tasks
    elif var <= 0.0:
        n_eff = n_eps
    else:
        n_eff = min(n_eps, max(n_tasks, p * (1 - p) / var))
    lo, hi = _wilson_bounds(p, n_eff, z)
    if not (m == 1).all() and 0.0 < p < 1.0 and confidence > 0.5:  # one-sided: 2c − 1
        lo, hi = _spend_edge_tail(p, lo, hi, n_eff, n_eps, n_tasks, m,
                                  z_value(2 * confidence - 1) * _t_ratio(df, n - 1, 2 * confidence - 1),
                                  (1 - confidence) / 2)
    # one episode per task: Wilson (at the Kish effective n when weights differ)
    return Rate(s, n, p, lo, hi, g, n_eff, "wilson" if (m == 1).all() else "task-clustered")


def _spend_edge_tail(p, lo, hi, n_eff, n_eps, n_tasks, episodes, z_one, tail):
    """``lo, hi`` with the bound at the far end from the edge p̂ is nearer (p̂ ≤ ½: the
    lower bound) moved as :func:`edge_tail.lower_bound` says; the other bound stays."""
    kappa = edge_tail.intra_task_kappa(n_eff, n_eps, n_tasks)
    q, two = (p, lo) if p <= 0.5 else (1 - p, 1 - hi)
    one = _wilson_bounds(q, n_eff, z_one)[0]
    low = edge_tail.lower_bound(two, max(two, one), kappa, episodes, tail)
    return (low, hi) if p <= 0.5 else (lo, 1 - low)


def pass_hat_k(counts: Iterable[tuple[int, int]], k: int) -> tuple[float | None, int]:
    """τ²-bench's pass^k over tasks given as (trials n, successes c): the mean of
    C(c, k) / C(n, k) (the chance that k trials drawn without replacement all succeed).
    Tasks with fewer than k trials are left out. Returns (value, tasks used); value is
    None when no task has k trials. Assumes the trials of a task are exchangeable."""
    if k < 1:
        raise ValueError("k must be >= 1")
    vals = []
    for n, c in counts:
        n, c = int(n), int(c)
        if c < 0 or c > n:
            raise ValueError(f"need 0 <= successes <= trials, got {c}/{n}")
        if n >= k:
            vals.append(math.comb(c, k) / math.comb(n, k))
    return (sum(vals) / len(vals) if vals else None), len(vals)


# ---------------------------------------------------------------- paired comparisons

Scores = Mapping[Hashable, "float | Sequence[float]"]


def task_mean(v) -> Fraction:
    """A task's score: the mean of its trial scores (1/0; an errored trial is 0), exact."""
    if isinstance(v, (int, float, np.integer, np.floating, bool, Fraction)):
        return Fraction(v).limit_denominator(10_000)
    v = list(v)
    if not v:
        raise ValueError("a task with no scored trials")
    return sum((Fraction(x).limit_denominator(10_000) for x in v), Fraction(0)) / len(v)


def paired_bootstrap(d: Sequence[float], weights: Sequence[float] | None = None,
                     strata: Sequence[Hashable] | None = None, n_boot: int = 10_000,
                     seed: int = 0, confidence: float = 0.95) -> tuple[float, float, float]:
    """(Σ w·d, lo, hi): the weighted mean of per-task differences ``d`` (A − B on the same
    task; weights default to 1/n) and its percentile bootstrap interval.

    Assumptions: tasks are independent, and the pairing is kept — a resample draws whole
    tasks (both methods' scores together), so what the two methods share on a task
    cancels. ``strata`` (e.g. each task's domain) keeps the design: tasks are resampled
    within their stratum, as for the mean of domain scores. The percentile interval
    under-covers with few tasks or few tasks that differ (see :data:`MIN_PAIRED_TASKS`)."""
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")
    d = np.asarray(d, dtype=float)
    w = np.full(len(d), 1.0 / len(d)) if weights is None else np.asarray(weights, dtype=float)
    labels = np.zeros(len(d), dtype=int) if strata is None else np.unique(
        np.asarray([repr(s) for s in strata]), return_inverse=True)[1]
    rng = np.random.default_rng(seed)
    boots = np.zeros(n_boot)
    for lab in np.unique(labels):
        idx_s = np.flatnonzero(labels == lab)
        x, ws = d[idx_s], w[idx_s].sum()  # within a stratum the weights are equal
        chunk = max(1, 2_000_000 // len(x))  # bound memory: ~2M indices at once
        for start in range(0, n_boot, chunk):
            stop = min(n_boot, start + chunk)
            idx = rng.integers(0, len(x), size=(stop - start, len(x)))
            boots[start:stop] += ws * x[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return float((w * d).sum()), float(lo), float(hi)


def paired_t(d: Sequence[float], weights: Sequence[float] | None = None,
             strata: Sequence[Hashable] | None = None,
             confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(Σ w·d, lo, hi, df): the weighted mean of per-task differences ``d`` (weights
    default to 1/n, equal within a stratum) and its cluster-robust t interval.

    Tasks are the clusters; the variance is the CR2 cluster-robust one, which for a
    (stratified) mean of cluster means is exactly Σ_h W_h² s_h² / n_h (W_h: stratum h's
    weight, s_h² the variance of its tasks' differences, n_h − 1 in the denominator), with
    Bell & McCaffrey's (2002) Satterthwaite degrees of freedom — n − 1 for one stratum,
    Welch's df across strata (Imbens & Kolesár 2016 recommend exactly this pair for few
    clusters) — then cut by :func:`effective_df` to 3 per task that differs. Assumes
    tasks independent and the pairing kept (what both methods share on a task cancels).
    Unlike the percentile bootstrap (:func:`paired_bootstrap`, 0.92 at 20 × 3) it is not
    too narrow with few tasks: 0.94-0.96 from 8 tasks in the designs of
    :mod:`edv_ray.validation.coverage_designs`. A stratum with one task adds no variance
    (its df is undefined); the interval is then too narrow — give it 2 tasks or more."""
    d = np.asarray(d, dtype=float)
    w = np.full(len(d), 1.0 / len(d)) if weights is None else np.asarray(weights, dtype=float)
    labels = np.zeros(len(d), dtype=int) if strata is None else np.unique(
        np.asarray([repr(s) for s in strata]), return_inverse=True)[1]
    est = float((w * d).sum())
    parts, dfs = [], []
    for lab in np.unique(labels):
        x = d[labels == lab]
        if len(x) < 2:
            continue
        v = float(w[labels == lab].sum()) ** 2 * float(x.var(ddof=1)) / len(x)
        parts.append(v)
        dfs.append(len(x) - 1)
    var = float(sum(parts))
    if var <= 0.0:
        return est, est, est, float("inf")
    df_bm = var ** 2 / sum(v * v / f for v, f in zip(parts, dfs))
    df = min(df_bm, float(effective_df(len(d) - 1, int((d != 0).sum()), PAIRED_DF_PER_TASK)))
    half = float(sps.t.ppf(0.5 + confidence / 2.0, df)) * math.sqrt(var)
    return est, est - half, est + half, df


def sign_flip_test(d: Sequence, weights: Sequence | None = None,
                   seed: int = 0) -> tuple[float, str]:
    """(two-sided p, how it was computed) for "A and B do not differ", by sign flips.

    Under the null each task's difference is as likely to be +d as −d (the two methods'
    scores on a task are exchangeable); tasks are independent. The statistic is Σ w·d;
    p = P(|Σ ±w·d| ≥ |observed|) over all 2^n sign patterns, computed exactly on an integer
    grid (task means and weights are fractions). With one episode per task and method,
    d ∈ {−1, 0, 1} and this is the exact McNemar test (binomial on the discordant tasks).
    Beyond :data:`EXACT_GRID` it falls back to seeded Monte Carlo sign flips."""
    x = [Fraction(v).limit_denominator(10_000) for v in d]
    if weights is not None:
        x = [v * Fraction(w).limit_denominator(1_000_000) for v, w in zip(x, weights)]
    x = [v for v in x if v != 0]
    if not x:
        return 1.0, "exact"
    scale = math.lcm(*(v.denominator for v in x))
    k = np.array([abs(int(v * scale)) for v in x], dtype=np.int64)
    obs = abs(int(sum(x) * scale))
    total = int(k.sum())
    if total * len(k) <= EXACT_GRID:
        dist = np.zeros(2 * total + 1)
        dist[total] = 1.0
        for step in k:  # add ±step with probability 1/2 each
            dist = 0.5 * (np.roll(dist, step) + np.roll(dist, -step))
        grid = np.arange(-total, total + 1)
        return float(min(1.0, dist[np.abs(grid) >= obs].sum())), "exact"
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1, 1), size=(MC_FLIPS, len(k)))
    stat = np.abs(signs @ k.astype(float))
    return float((1 + (stat >= obs).sum()) / (MC_FLIPS + 1)), f"Monte Carlo ({MC_FLIPS:,} flips)"


def detectable_difference(d: Sequence[float], weights: Sequence[float] | None = None,
                          power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest true difference δ that the sign-flip (McNemar) test at two-sided
    ``alpha`` detects with probability ``power`` over these tasks — what a null result can
    rule out. None when no δ can be detected (too few tasks, or no task differs).

    Assumptions: the spread of per-task differences seen here (their second moment about
    0, Σ w²d² — for one episode per task the discordant share) is what a re-run would
    show; tasks independent; the normal approximation (Connor 1987 for McNemar):
    δ = z_{1−α/2}·√V₀ + z_power·√(V₀ − δ²·Σw²), with V₀ = Σ w²·d²."""
    d = np.asarray(d, dtype=float)
    if not len(d):
        return None
    w = np.full(len(d), 1.0 / len(d)) if weights is None else np.asarray(weights, dtype=float)
    return solve_detectable(float((w ** 2 * d ** 2).sum()), float((w ** 2).sum()), power, alpha)


@dataclass(frozen=True)
class PairedDiff:
    """A − B over the tasks both scored: ``diff`` (None when none), its :func:`paired_t` interval
    (None, with ``why`` saying so, below the minimum tasks), the exact test's two-sided
    ``p`` and the ``detectable`` difference at 80 % power."""

    diff: float | None
    lo: float | None
    hi: float | None
    p: float | None
    p_method: str
    detectable: float | None
    tasks: int
    differing: int
    only_a: int
    only_b: int
    n_boot: int
    seed: int
    why: str = ""  # why there is no interval ("too few tasks ...")

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)


def paired_comparison(a: Scores, b: Scores, strata: Mapping[Hashable, Hashable] | None = None,
                      n_boot: int = 10_000, seed: int = 0, confidence: float = 0.95,
                      min_tasks: int = MIN_PAIRED_TASKS) -> PairedDiff:
    """A − B paired by task. ``a`` / ``b`` map a task key to its trial scores (1/0; an
    errored trial is 0) or to one number; trials are averaged within a task first, so each
    task weighs the same. With ``strata`` (task key → stratum, e.g. domain) the difference
    is the mean over strata of each stratum's mean (the mean of domain scores), resampled
    and sign-flipped with those weights. Returns the :func:`paired_t` interval
    (only from ``min_tasks`` paired tasks and :data:`MIN_DIFFERING_TASKS` differing ones),
    the :func:`sign_flip_test` p and the :func:`detectable_difference`."""
    keys = sorted(set(a) & set(b), key=repr)
    only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
    if not keys:
        return PairedDiff(None, None, None, None, "", None, 0, 0, only_a, only_b, n_boot, seed,
                          "no task scored by both")
    dq = [task_mean(a[k]) - task_mean(b[k]) for k in keys]
    groups = [strata[k] if strata is not None else 0 for k in keys]
    per = {g: groups.count(g) for g in set(groups)}
    wq = [Fraction(1, len(per) * per[g]) for g in groups]
    d, w = [float(v) for v in dq], [float(v) for v in wq]
    diff = float(sum(x * y for x, y in zip(dq, wq)))
    p, how = sign_flip_test(dq, wq, seed=seed)
    differing = sum(1 for v in dq if v != 0)
    why = ""
    if len(keys) < min_tasks:
        why = f"too few tasks ({len(keys)} paired, need {min_tasks})"
    elif differing < MIN_DIFFERING_TASKS:
        why = f"too few tasks differ ({differing}, need {MIN_DIFFERING_TASKS})"
    lo = hi = None
    if not why:
        _, lo, hi, _ = paired_t(d, w, groups if strata is not None else None, confidence)
    return PairedDiff(diff, lo, hi, p, how, detectable_difference(d, w), len(keys), differing,
                      only_a, only_b, n_boot, seed, why)
