"""Paired comparisons of two methods over the same tasks (``edv compare``'s differences,
``edv power``'s test), split from :mod:`edv_ray.report.stats` (the rates of one cell):

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

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import stats as sps

from edv_ray.report.stats import PAIRED_DF_PER_TASK, effective_df
from edv_ray.report.stats_planning import solve_detectable

MIN_PAIRED_TASKS = 20  # below: no interval ("too few tasks"); the exact test is still given
MIN_DIFFERING_TASKS = 5  # below: no interval ("too few tasks differ")
EXACT_GRID = 50_000_000  # the sign-flip test is exact while tasks × integer range stay below
MC_FLIPS = 200_000  # else: seeded Monte Carlo sign flips

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
