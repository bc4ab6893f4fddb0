"""Planning a paired comparison before any data (the normal approximation to McNemar's
test, Connor 1987): the difference a number of tasks can detect, and the tasks a
difference needs. The same assumptions as :func:`edv_ray.report.stats.detectable_difference`."""

from __future__ import annotations

import math

import scipy.stats as sps

from edv_ray.report.stats import _detectable, z_value


def planned_detectable_difference(tasks: int, discordant_share: float, power: float = 0.8,
                                  alpha: float = 0.05) -> float | None:
    """:func:`detectable_difference` before any data: ``tasks`` paired tasks, one episode
    each per method, of which a share ``discordant_share`` (one method solves, the other
    not) is expected to differ. Same assumptions (normal approximation to McNemar)."""
    if tasks < 1 or not 0.0 < discordant_share <= 1.0:
        raise ValueError("need tasks >= 1 and 0 < discordant_share <= 1")
    return _detectable(discordant_share / tasks, 1.0 / tasks, power, alpha)


def tasks_needed(delta: float, discordant_share: float, power: float = 0.8,
                 alpha: float = 0.05) -> int:
    """Paired tasks (one episode each per method) for the McNemar test at two-sided
    ``alpha`` to detect a true difference ``delta`` with probability ``power`` when a
    share ``discordant_share`` of tasks differ: ⌈(z_{1−α/2}·√ψ + z_power·√(ψ − δ²))² / δ²⌉
    (Connor 1987). The inverse of :func:`planned_detectable_difference`."""
    if not 0.0 < abs(delta) <= discordant_share <= 1.0:
        raise ValueError("need 0 < |delta| <= discordant_share <= 1")
    za, zb = z_value(1 - alpha), float(sps.norm.ppf(power))
    psi, d2 = discordant_share, delta * delta
    return math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - d2)) ** 2 / d2)
