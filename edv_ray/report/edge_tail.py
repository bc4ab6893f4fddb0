"""The tail a task-clustered interval cannot spend near 0 or 1 (issue 27 item 5).

Near 0 (1 is the mirror image), data with no success at all are the most extreme data
there can be. At a rate μ where they are more than α/2 likely, no outcome is unlikely
enough on the low side to reject μ: a two-sided level-α test of μ has nothing to spend
there, so it may spend all of α on the far side — the tail that can occur. That is the
idea of the non-equal-tailed exact intervals for discrete data (Sterne 1954, Blaker 2000);
here it is applied to the approximate interval of :func:`edv_ray.report.stats.clustered_rate`.
Inverting that test gives the lower bound

    L = L₁             where μ* ≥ L₁
        max(μ*, L₂)    otherwise

with L₂ ≤ L₁ the interval's two-sided (α/2) and one-sided (α) lower bounds and μ* the rate
at which "no success in any task" has probability α/2 (it falls as μ grows). The upper
bound is left as it is.

Why it matters: an equal-tailed interval (every interval whose upper bound grows with the
successes) must cover μ in all the all-zero data sets or in none; where they are more than
2.5 % of the data it covers them all, misses at most 2.5 % on the far side and covers at
least 97.5 % — 0.974-0.981 with 8-16 tasks near 0 or 1 (experiments/validation/README.md).
With the far tail spent, those designs cover 0.95-0.96.

P(no success | μ) is a beta-binomial's: the tasks' rates ~ Beta(μκ, (1 − μ)κ), κ from the
intra-task correlation ρ the cluster-robust variance implies (design effect
deff = n_episodes / n_eff = 1 + (m̄ − 1)ρ, κ = (1 − ρ)/ρ; ρ = 0: independent episodes,
ρ = 1: a task's episodes all alike). The more alike a task's episodes, the likelier the
all-zero data, the wider the region where the far tail is spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special


def intra_task_kappa(n_eff: float, n_episodes: float, n_tasks: float) -> float:
    """κ of the tasks' Beta rates implied by the design effect ``n_episodes / n_eff`` with
    ``n_episodes / n_tasks`` episodes a task: ``inf`` for independent episodes, 0 for a
    task's episodes all alike."""
    per_task = n_episodes / n_tasks
    if per_task <= 1.0 or n_eff <= 0:
        return math.inf
    rho = (n_episodes / n_eff - 1.0) / (per_task - 1.0)
    if rho <= 0.0:
        return math.inf
    return 0.0 if rho >= 1.0 else (1.0 - rho) / rho


def log_p_none(mu: float, kappa: float, episodes: Sequence[float] | np.ndarray) -> float:
    """log P(no success in any task | rate μ): task g has ``episodes[g]`` episodes, its
    rate ~ Beta(μκ, (1 − μ)κ) (κ = inf: every episode independent at μ; κ = 0: each task
    solves all its episodes or none)."""
    m = np.asarray(episodes, dtype=float)
    if mu <= 0.0:
        return 0.0
    if mu >= 1.0:
        return -math.inf
    if math.isinf(kappa):
        return float(m.sum() * math.log1p(-mu))
    if kappa <= 0.0:
        return float(len(m) * math.log1p(-mu))
    a, b = mu * kappa, (1.0 - mu) * kappa
    return min(0.0, float((special.betaln(a, b + m) - special.betaln(a, b)).sum()))


def lower_bound(two_sided: float, one_sided: float, kappa: float,
                episodes: Sequence[float] | np.ndarray, tail: float) -> float:
    """The lower bound near 0: ``one_sided`` (at level 2·tail) where P(no success) at it is
    over ``tail``, ``two_sided`` (at level tail) where it is at most ``tail`` there, and
    between them the rate μ* where it is ``tail``."""
    log_tail = math.log(tail)
    if log_p_none(two_sided, kappa, episodes) <= log_tail:
        return two_sided
    if log_p_none(one_sided, kappa, episodes) > log_tail:
        return one_sided
    return float(optimize.brentq(lambda mu: log_p_none(mu, kappa, episodes) - log_tail,
                                 two_sided, one_sided, xtol=1e-9))
