"""Coverage of ``edv compare``'s intervals in hard designs (issue 27 item 5): few tasks,
rates near 0 or 1, strongly heterogeneous tasks.

Each repetition draws tasks from a planted population — task rate u ~ Beta(μκ, (1 − μ)κ)
(mean μ, concentration κ: κ = 1–2 means tasks that are mostly solved or mostly not) —
and their trials for two methods on the same tasks: A solves a trial with probability u,
B with u + δ(1 − u). The truths are the population's: A's rate μ, B − A = δ(1 − μ). The
cell interval is :func:`clustered_rate` (with several domains: the mean of domain scores,
as compare weighs it) and the paired one :func:`paired_t` (tasks within domains), shown
only where compare shows it (from :data:`MIN_DIFFERING_TASKS` differing tasks): its
coverage is over the repetitions that show one, and ``shown`` says how many did.

Near 0 (1 is the mirror image) the repetitions with no success at all are one and the
same data, so an equal-tailed interval covers μ in all of them or in none; where they are
over 2.5 % of the data it covers them all and at least 97.5 % in all (0.974-0.981 here
before 2026-12-07). :func:`clustered_rate` spends that unusable tail on the far side
(:mod:`edv_ray.report.edge_tail`); the table's columns *at the edge* and *misses edge /
far* show where its misses fall.

Run ``python experiments/validation/coverage_table.py --reps 2000`` for the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edv_ray.report.paired import MIN_DIFFERING_TASKS, MIN_PAIRED_TASKS, paired_t
from edv_ray.report.stats import clustered_rate, wilson

BAND = (0.93, 0.97)
DELTA = 0.2  # B = u + δ(1 − u)
MUS = (0.05, 0.1, 0.5, 0.9, 0.95)
CONCENTRATIONS = (1.0, 2.0)


@dataclass(frozen=True)
class Design:
    domains: int
    tasks: int  # per domain
    trials: int

    @property
    def name(self) -> str:
        head = f"{self.domains} domains × " if self.domains > 1 else ""
        return f"{head}{self.tasks} × {self.trials}"


DESIGNS = (Design(1, 20, 3), Design(1, 16, 10), Design(1, 8, 10), Design(2, 8, 10),
           Design(1, 50, 5), Design(1, 100, 5))


@dataclass(frozen=True)
class Coverage:
    design: Design
    mu: float
    kappa: float
    reps: int
    cell: float  # share of repetitions whose cell interval covers μ
    cell_width: float
    diff: float | None  # share of shown paired intervals covering δ(1 − μ)
    diff_width: float | None
    shown: int  # repetitions with a paired interval
    edge: float = 0.0  # share of repetitions with no success (μ ≤ ½) / no failure (μ > ½)
    miss_edge: float = 0.0  # cell misses between μ and the near edge (μ ≤ ½: hi < μ)
    miss_far: float = 0.0  # cell misses on the other side

    def verdict(self) -> str:
        """``in band`` when the cell's observed coverage is consistent with 0.93–0.97 (its
        95 % Wilson interval over the repetitions meets the band), else ``over`` / ``under``."""
        return _band(self.cell, self.reps)

    def diff_verdict(self) -> str:
        """The paired interval's: ``in band`` when consistent with 0.93–0.97 over the
        shown repetitions, with ``compare withholds`` below compare's task minimum."""
        if self.diff is None:
            return "none shown"
        tasks = self.design.domains * self.design.tasks
        return _band(self.diff, self.shown) + (
            f" (compare withholds: < {MIN_PAIRED_TASKS} tasks)" if tasks < MIN_PAIRED_TASKS else "")


def _band(share: float, reps: int) -> str:
    """``in band`` when ``share`` of ``reps`` repetitions is consistent with the band (its
    95 % Wilson interval meets it), else ``over`` / ``under``."""
    cov = wilson(round(share * reps), reps)
    if cov.lo <= BAND[1] and cov.hi >= BAND[0]:
        return "in band"
    return "over" if cov.lo > BAND[1] else "under"


def draw(design: Design, mu: float, kappa: float, reps: int,
         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Successes of A and B per repetition and task: two (reps, domains · tasks) arrays."""
    u = rng.beta(mu * kappa, (1 - mu) * kappa, (reps, design.domains * design.tasks))
    a = rng.binomial(design.trials, u)
    b = rng.binomial(design.trials, u + DELTA * (1 - u))
    return a, b


def coverage(design: Design, mu: float, kappa: float, reps: int, seed: int = 0) -> Coverage:
    """One cell of the table: ``reps`` seeded repetitions through compare's own interval
    functions."""
    rng = np.random.default_rng([seed, design.domains, design.tasks, design.trials,
                                 int(mu * 1000), int(kappa * 10)])
    a, b = draw(design, mu, kappa, reps, rng)
    g, m = design.domains * design.tasks, design.trials
    episodes = [m] * g
    weights = [1.0 / (design.domains * design.tasks * m)] * g if design.domains > 1 else None
    strata = np.repeat(np.arange(design.domains), design.tasks) if design.domains > 1 else None
    truth = DELTA * (1 - mu)
    cell_hits, cell_w, diff_hits, diff_w, shown = 0, 0.0, 0, 0.0, 0
    near_zero = mu <= 0.5
    edge = int((a.sum(axis=1) == (0 if near_zero else g * m)).sum())
    miss_edge = 0
    for ya, yb in zip(a, b):
        r = clustered_rate(ya, episodes, weights)
        cell_hits += r.lo <= mu <= r.hi
        miss_edge += (r.hi < mu) if near_zero else (r.lo > mu)
        cell_w += r.hi - r.lo
        d = (yb - ya) / m
        if int((d != 0).sum()) < MIN_DIFFERING_TASKS:
            continue
        _, lo, hi, _ = paired_t(d, strata=strata)
        shown += 1
        diff_hits += lo <= truth <= hi
        diff_w += hi - lo
    return Coverage(design, mu, kappa, reps, cell_hits / reps, cell_w / reps,
                    diff_hits / shown if shown else None, diff_w / shown if shown else None,
                    shown, edge / reps, miss_edge / reps, (reps - cell_hits - miss_edge) / reps)


def grid(reps: int, seed: int = 0, designs=DESIGNS, progress=None) -> list[Coverage]:
    """Every design × μ × κ; ``progress(i, total, row)`` after each."""
    cells = [(d, mu, k) for d in designs for mu in MUS for k in CONCENTRATIONS]
    out = []
    for i, (d, mu, k) in enumerate(cells):
        out.append(coverage(d, mu, k, reps, seed))
        if progress:
            progress(i + 1, len(cells), out[-1])
    return out


def table_md(rows: list[Coverage]) -> str:
    """The markdown table: coverage (mean width) of cells and paired differences; for the
    cell, the share of repetitions at the edge (no success / no failure), its misses on
    the edge's side and the far side, and its verdict."""
    lines = ["| design (tasks × trials) | μ | κ | cell coverage | cell width | at the edge | "
             "misses edge / far | cell verdict | paired coverage | paired width | shown | "
             "paired verdict |", "|" + "---|" * 12]
    for r in rows:
        diff = "–" if r.diff is None else f"{r.diff:.3f}"
        dw = "–" if r.diff_width is None else f"{r.diff_width:.3f}"
        lines.append(f"| {r.design.name} | {r.mu} | {r.kappa:g} | {r.cell:.3f} | "
                     f"{r.cell_width:.3f} | {r.edge:.3f} | {r.miss_edge:.3f} / {r.miss_far:.3f} | "
                     f"{r.verdict()} | {diff} | {dw} | {r.shown}/{r.reps} | {r.diff_verdict()} |")
    return "\n".join(lines)
