"""Small, pure statistics for comparing methods (numpy + the standard library, no scipy).

- ``wilson``: Wilson score interval for a rate (successes out of n).
- ``paired_bootstrap``: the difference of two methods' Pass@1, paired by task: trials (and
  anything else scored for the same task) are averaged within a task first, then tasks are
  resampled with replacement.
- ``pass_hat_k``: τ²-bench's pass^k — for a task with n trials and c successes,
  C(c, k) / C(n, k), averaged over tasks.
- ``intervals_overlap``: whether two closed intervals share a point.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


def z_value(confidence: float = 0.95) -> float:
    """The two-sided normal quantile for ``confidence`` (1.959964 for 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


@dataclass(frozen=True)
class Rate:
    """A rate with its Wilson interval. ``rate`` is None when n is 0 (then lo=0, hi=1)."""

    successes: int
    n: int
    rate: float | None
    lo: float
    hi: float


def wilson(successes: int, n: int, confidence: float = 0.95) -> Rate:
    """Wilson score interval: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    successes, n = int(successes), int(n)
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return Rate(0, 0, None, 0.0, 1.0)
    z = z_value(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # clamp the float dust at the ends (0/n and n/n give exactly 0 and 1 in exact arithmetic)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return Rate(successes, n, p, lo, hi)


def intervals_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when the closed intervals [a0, a1] and [b0, b1] share at least one point."""
    (a0, a1), (b0, b1) = a, b
    return a0 <= b1 and b0 <= a1


@dataclass(frozen=True)
class PairedDiff:
    """mean(A − B) over paired tasks, its bootstrap percentile interval, and a share-based
    two-sided p (2 · the smaller share of resampled differences on either side of 0, at most 1;
    a rough guide, not an exact test). ``diff`` is None when no task is scored by both."""

    diff: float | None
    lo: float | None
    hi: float | None
    p: float | None
    tasks: int
    only_a: int
    only_b: int
    n_boot: int
    seed: int

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)


Scores = Mapping[Hashable, "float | Sequence[float]"]


def _task_mean(v) -> float:
    if isinstance(v, (int, float, np.integer, np.floating, bool)):
        return float(v)
    v = [float(x) for x in v]
    if not v:
        raise ValueError("a task with no scored trials")
    return sum(v) / len(v)


def paired_bootstrap(a: Scores, b: Scores, n_boot: int = 10_000, seed: int = 0,
                     confidence: float = 0.95) -> PairedDiff:
    """Paired bootstrap of mean(A − B) over the tasks both score.

    ``a`` and ``b`` map a task key (e.g. ``(domain, task_id)``) to its trial scores (1/0, an
    errored trial is 0) or to one number; trials are averaged within the task first, so every
    task weighs the same however many trials it has."""
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")
    keys = sorted(set(a) & set(b), key=repr)
    only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
    if not keys:
        return PairedDiff(None, None, None, None, 0, only_a, only_b, n_boot, seed)
    d = np.array([_task_mean(a[k]) - _task_mean(b[k]) for k in keys])
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    chunk = max(1, 2_000_000 // len(d))  # bound memory: at most ~2M indices at once
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, len(d), size=(stop - start, len(d)))
        boots[start:stop] = d[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    p = min(1.0, 2.0 * min(float(np.mean(boots <= 0)), float(np.mean(boots >= 0))))
    return PairedDiff(float(d.mean()), float(lo), float(hi), p, len(keys), only_a, only_b,
                      n_boot, seed)


def pass_hat_k(counts: Iterable[tuple[int, int]], k: int) -> tuple[float | None, int]:
    """τ²-bench's pass^k over tasks given as (trials n, successes c): the mean of
    C(c, k) / C(n, k). Tasks with fewer than k trials are left out. Returns (value, tasks
    used); value is None when no task has k trials."""
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
