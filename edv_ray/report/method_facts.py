"""What the reports know about methods — all of it asked of the registry, so ``report/``
names no method and a newly registered one appears in every table, compare, validity
check and audit: scored per agent or picking (``Method.scoring``), the comparison
baseline (``Method.baseline``), the order of rows (``Method.report_order``), its
validity checks, audit items and judging roles."""

from __future__ import annotations

from edv_ray.methods.registry import PER_AGENT, Method
from edv_ray.plugins import known_methods


def methods() -> dict[str, Method]:
    return known_methods()


def method_order() -> tuple[str, ...]:
    """Every registered method in report order (paired comparisons: later − earlier)."""
    ms = methods()
    return tuple(sorted(ms, key=lambda n: (ms[n].report_order, n)))


def per_model_methods() -> tuple[str, ...]:
    """Methods scored per agent (in report order): their tables break out each model."""
    ms = methods()
    return tuple(n for n in method_order() if ms[n].scoring == PER_AGENT)


def baselines() -> tuple[str, ...]:
    """The methods that can be the comparison baseline, preferred first."""
    ms = methods()
    return tuple(sorted((n for n, m in ms.items() if m.baseline is not None),
                        key=lambda n: (ms[n].baseline, n)))


def judging_roles() -> tuple[str, ...]:
    return tuple(sorted({r for m in methods().values() for r in m.judging_roles}))
