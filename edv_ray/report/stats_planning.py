"""Planning a paired comparison before any data (the normal approximation to McNemar's
test, Connor 1987): the difference a number of tasks can detect, and the tasks a
difference needs. The same assumptions as :func:`edv_ray.report.paired.detectable_difference`."""

from __future__ import annotations

import math

import scipy.stats as sps
from scipy import optimize


def planned_detectable_difference(tasks: int, discordant_share: float, power: float = 0.8,
                                  alpha: float = 0.05) -> float | None:
    """:func:`detectable_difference` before any data: ``tasks`` paired tasks, one episode
    each per method, of which a share ``discordant_share`` (one method solves, the other
    not) is expected to differ. Same assumptions (normal approximation to McNemar)."""
    if tasks < 1 or not 0.0 < discordant_share <= 1.0:
        raise ValueError("need tasks >= 1 and 0 < discordant_share <= 1")
    return solve_detectable(discordant_share / tasks, 1.0 / tasks, power, alpha)


def tasks_needed(delta: float, discordant_share: float, power: float = 0.8,
                 alpha: float = 0.05) -> int:
    """Paired tasks (one episode each per method) for the McNemar test at two-sided
    ``alpha`` to detect a true difference ``delta`` with probability ``power`` when a
    share ``discordant_share`` of tasks differ: ⌈(z_{1−α/2}·√ψ + z_power·√(ψ − δ²))² / δ²⌉
    (Connor 1987). The inverse of :func:`planned_detectable_difference`."""
    if not 0.0 < abs(delta) <= discordant_share <= 1.0:
        raise ValueError("need 0 < |delta| <= discordant_share <= 1")
    za, zb = float(sps.norm.ppf(1 - alpha / 2)), float(sps.norm.ppf(power))
    psi, d2 = discordant_share, delta * delta
    return math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - d2)) ** 2 / d2)


def solve_detectable(v0: float, sw2: float, power: float, alpha: float) -> float | None:
    """Solve δ = z_{1−α/2}·√V₀ + z_power·√(V₀ − δ²·Σw²) for δ (V₀ = Σ w²·d², ``sw2`` = Σ w²;
    :func:`edv_ray.report.paired.detectable_difference`); None when no δ is detectable."""
    if v0 <= 0.0:
        return None
    za, zb = float(sps.norm.ppf(1 - alpha / 2)), float(sps.norm.ppf(power))
    top = math.sqrt(v0 / sw2)  # the largest δ the spread allows (V₁ = 0)

    def gap(delta):
        return delta - za * math.sqrt(v0) - zb * math.sqrt(max(0.0, v0 - delta * delta * sw2))

    if gap(top) < 0:
        return None
    return float(optimize.brentq(gap, 0.0, top, xtol=1e-10))
