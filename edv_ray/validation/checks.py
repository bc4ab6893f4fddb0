"""One row of the validation table: a check, the planted value (computed apart from the
framework), the measured value with the framework's 95 % interval, and the verdict.

Verdicts hold the whole suite to one error rate: a row passes when its planted value lies
inside the framework's interval at 1 − 0.05/FAMILY (and, for a row over m cells — per
agent, domain or epoch —, at 1 − 0.05/(FAMILY·m)), so a correct framework fails some row
of the suite at most 5 % of the time (Bonferroni). The table shows the usual 95 %
interval; ``PASS*`` marks a planted value outside it but inside the suite's interval
(expected in about one row in twenty). Rows without a verdict are diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from edv_ray.report.paired import PairedDiff
from edv_ray.report.stats import Rate, z_value

# the Bonferroni family: the suite's verdict rows that chance can fail (intervals and
# Monte Carlo ranges; not the specification checks, which a correct framework always passes)
# — 45 at the full size since the profile-only epoch rows, the gains and the relevance
# worlds (issue 27), 64 with the construction world's seven (1b+, 2a+-2f+) and the wide
# epochs world's twelve (5a+-5c·+), 67 with the rates world's three (1b+-1d+)
FAMILY = 67

RateFn = Callable[[float], Rate]  # confidence → the framework's rate and interval
DiffFn = Callable[[float], PairedDiff]


def level(cells: int = 1) -> float:
    """The confidence a verdict uses for one of ``cells`` cells of a row."""
    return 1 - 0.05 / (FAMILY * max(1, cells))


POWER = 0.8


def detectable(lo95: float | None, hi95: float | None, cells: int = 1) -> float | None:
    """The smallest bias δ (measured − planted) that the row's verdict detects with 80 %
    power at this size: the verdict fails when |estimate − planted| exceeds z_fw·SE (z_fw:
    the suite's level for one of ``cells`` cells), so δ = (z_fw + z_0.80)·SE, with SE read
    off the 95 % interval's half-width (normal approximation; Wilson intervals near 0 or 1
    are asymmetric, so there it is a rough figure)."""
    if lo95 is None or hi95 is None:
        return None
    se = (hi95 - lo95) / (2 * z_value(0.95))
    return (z_value(level(cells)) + float(NormalDist().inv_cdf(POWER))) * se


@dataclass
class Row:
    check: str  # "3a EDV − ReasoningBank (biased world)"
    planted: str
    measured: str
    ok: bool | None
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    outside95: bool = False  # passed, but the planted value lies outside the 95 % interval
    # the smallest bias (absolute, in the row's units) its verdict detects with 80 % power
    # at this size (:func:`detectable`); None: the row has no interval of its own
    detects: float | None = None
    same_as: str = ""  # a row repeating a check in another world (:func:`again`): its check

    def __post_init__(self) -> None:
        # verdicts computed on numpy floats are numpy bools: `ok is True` must hold
        self.ok = None if self.ok is None else bool(self.ok)
        self.outside95 = bool(self.outside95)
        self.detects = None if self.detects is None else float(self.detects)

    @property
    def relative(self) -> float | None:
        """The detectable bias relative to the planted value, where that is a rate or
        effect away from 0 (a relative figure near 0 says nothing): None otherwise."""
        planted = self.figures.get("planted")
        if self.detects is None or not isinstance(planted, (int, float)) or abs(planted) < 0.05:
            return None
        return self.detects / abs(planted)

    @property
    def sensitivity(self) -> str:
        """``±0.085 (17 %)``: the detectable bias, and relative to the planted value."""
        if self.detects is None:
            return "—"
        rel = f" ({self.relative:.0%})" if self.relative is not None else ""
        return f"±{self.detects:.3f}{rel}"

    @property
    def verdict(self) -> str:
        if self.ok is None:
            return "info"
        return ("PASS*" if self.outside95 else "PASS") if self.ok else "FAIL"


def num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}"


def rate_text(r: Rate) -> str:
    return f"{num(r.rate)} [{num(r.lo)}, {num(r.hi)}] n={r.n}"


def diff_text(d: PairedDiff) -> str:
    ci = f"[{signed(d.lo)}, {signed(d.hi)}]" if d.lo is not None else f"({d.why})"
    return f"{signed(d.diff)} {ci} over {d.tasks} tasks"


def covers(r: Rate, planted: float) -> bool:
    return r.rate is not None and r.lo - 1e-12 <= planted <= r.hi + 1e-12


def diff_covers(d: PairedDiff, planted: float | tuple[float, float]) -> bool:
    """The interval covers the planted value (meets the planted range (lo, hi))."""
    lo, hi = planted if isinstance(planted, tuple) else (planted, planted)
    return d.lo is not None and d.lo - 1e-12 <= hi and lo <= d.hi + 1e-12


def rate_fig(r: Rate) -> dict:
    return {"rate": r.rate, "lo": r.lo, "hi": r.hi, "n": r.n, "tasks": r.tasks}


def diff_fig(d: PairedDiff) -> dict:
    return {"diff": d.diff, "lo": d.lo, "hi": d.hi, "p": d.p, "tasks": d.tasks, "why": d.why}


def rate_row(check: str, planted: float, fn: RateFn, detail: str = "") -> Row:
    r95, rfw = fn(0.95), fn(level())
    return Row(check, num(planted), rate_text(r95), covers(rfw, planted), detail,
               {"planted": planted, **rate_fig(r95), "fw_lo": rfw.lo, "fw_hi": rfw.hi},
               not covers(r95, planted), detectable(r95.lo, r95.hi))


def cells_row(check: str, cells: list[tuple[str, float, RateFn]], detail: str = "") -> Row:
    """Several cells (label, planted, rate function): PASS when every cell's interval at
    the row's Bonferroni level covers its planted value."""
    got = [(lab, p, fn(0.95), fn(level(len(cells)))) for lab, p, fn in cells]
    missed = [lab for lab, p, _r, rfw in got if not covers(rfw, p)]
    out95 = [lab for lab, p, r, _f in got if not covers(r, p)]
    planted = ", ".join(f"{lab} {num(p)}" for lab, p, _r, _f in got)
    measured = ", ".join(f"{lab} {num(r.rate)} [{num(r.lo, 2)}, {num(r.hi, 2)}]" for lab, _p, r, _f in got)
    note = f"missed: {', '.join(missed)}" if missed else (
        f"outside the 95 % interval only: {', '.join(out95)}" if out95 else "")
    # the row's sensitivity: its least sensitive cell (a bias in that cell alone)
    worst = max((detectable(r.lo, r.hi, len(got)) or 0.0 for _l, _p, r, _f in got), default=None)
    return Row(check, planted, measured, bool(got) and not missed,
               "; ".join(x for x in (detail, note) if x),
               {"cells": [{"label": lab, "planted": p, **rate_fig(r), "fw_lo": f.lo, "fw_hi": f.hi}
                          for lab, p, r, f in got],
                "planted": min((p for _l, p, _r, _f in got), default=None)}, bool(out95), worst)


def diff_row(check: str, planted: float | tuple[float, float], fn: DiffFn, detail: str = "",
             exclude_zero: bool = False) -> Row:
    """A paired difference: PASS when the suite-level interval covers the planted value
    (a planted range (lo, hi): meets it; its midpoint is the figure the sensitivity is
    relative to, and a bias of it is seen only once it leaves the range: the detectable
    bias adds half the range's width) and, with ``exclude_zero``, the 95 % interval
    excludes 0: the effect is shown. No task scored by both sides: FAIL. Too few tasks (or
    too few that differ) for compare to give an interval: not evaluable at this size (no
    verdict)."""
    d95 = fn(0.95)
    ranged = isinstance(planted, tuple)
    mid = sum(planted) / 2 if ranged else planted
    shown = f"{signed(planted[0])} to {signed(planted[1])}" if ranged else signed(planted)
    figures = {"planted": mid, **({"planted_range": list(planted)} if ranged else {}), **diff_fig(d95)}
    if d95.diff is None:
        return Row(check, shown, diff_text(d95), False, detail, figures)
    if d95.lo is None:
        return Row(check, shown, diff_text(d95), None,
                   "; ".join(x for x in (detail, "not evaluable at this size") if x), figures)
    dfw = fn(level())
    ok = diff_covers(dfw, planted) and (not exclude_zero or d95.lo > 0 or d95.hi < 0)
    # a bias of the midpoint first has to leave the range: half its width comes on top
    detects = detectable(d95.lo, d95.hi) + ((planted[1] - planted[0]) / 2 if ranged else 0.0)
    return Row(check, shown, diff_text(d95), ok, detail,
               {**figures, "fw_lo": dfw.lo, "fw_hi": dfw.hi}, not diff_covers(d95, planted), detects)


def validity_row(name: str, failed: list[str]) -> Row:
    return Row(f"0  validity checks of the {name} run", "all pass",
               "all pass" if not failed else "; ".join(failed)[:300], not failed)


def engine_row(name: str, run, oracle, agent_identity: bool) -> Row:
    """Every episode ended as the engine planned it (the benchmark's grading realised
    the planted decision) — the ground every other check stands on."""
    if not agent_identity:
        return Row(f"0  engine realises its plan ({name})", "1.000", "—", None,
                   "draw_identity request_seed: the plan depends on the request's seed")
    rows = run.rows("SELECT agent, domain, task_id, trial, episode_id, experiences, status, success "
                    "FROM episodes")
    bad = [r[4] for r in rows if r[6] != "ok"
           or bool(r[7]) != oracle.planned_success(r[0], r[1], r[2], r[3], r[4], r[5] or [])]
    share = 1 - len(bad) / max(1, len(rows))
    return Row(f"0  engine realises its plan ({name})", "1.000", f"{share:.3f} of {len(rows)} episodes",
               not bad, f"first differing: {bad[:3]}" if bad else "")


def predicted(p_reps, n: int, draws: int = 40, seed: int = 0):
    """What a rate measured over ``n`` independent episodes may read, planted: for each
    Monte Carlo repetition's expected rate (``p_reps``), ``draws`` binomial draws — the
    repetitions carry what the run's own draws decide (which groups contrasted, what the
    bank holds), the binomial the episodes' dice."""
    p = np.repeat(np.clip(np.asarray(p_reps, dtype=float), 0.0, 1.0), draws)
    return np.random.default_rng(seed).binomial(max(1, n), p) / max(1, n)


def range_row(check: str, cells: list[tuple[str, Any, float | None]], detail: str = "") -> Row:
    """Cells (label, the planted distribution of what the run may read — an array of
    simulated measurements, from the profile and the design alone —, measured): PASS when
    every measurement lies in its distribution's central range at the row's Bonferroni
    level. For quantities a small world's own draws move more than a test-time interval
    covers (a bank's growth, an epoch curve)."""
    q = (1 - level(len(cells))) / 2
    got = [(lab, np.quantile(sims, [q, 1 - q]), float(np.mean(sims)), m) for lab, sims, m in cells]
    missed = [lab for lab, (lo, hi), _mu, m in got if m is None or not lo - 1e-12 <= m <= hi + 1e-12]
    return Row(check, ", ".join(f"{lab} {num(mu)} [{num(lo, 2)}, {num(hi, 2)}]"
                                for lab, (lo, hi), mu, _m in got),
               ", ".join(f"{lab} {num(m)}" for lab, _r, _mu, m in got), bool(got) and not missed,
               "; ".join(x for x in (detail, f"outside the planted range: {', '.join(missed)}"
                                     if missed else "") if x),
               {"cells": [{"label": lab, "planted": mu, "lo": lo, "hi": hi, "measured": m}
                          for lab, (lo, hi), mu, m in got]})


def again(rows: list[Row], world: str) -> list[Row]:
    """The rows of checks run again in another ``world``: numbered with a "+" ("2a+") and
    the world named after the check; each remembers the check it repeats (``same_as``)."""
    for row in rows:
        number, rest = row.check.split(" ", 1)
        row.same_as, row.check = row.check, f"{number}+ {rest} ({world} world)"
    return rows


def sensitivity_summary(rows: list[Row], target: float = 0.20) -> str:
    """Which rows detect a ``target`` relative bias with 80 % power at this size, and for
    the others the factor of data (tasks × trials) they would need: (relative / target)²,
    the detectable bias shrinking as 1/√n. Rows planted near 0 state an absolute bias.
    A check run in two worlds (``2a`` and, through :func:`again`, the construction
    world's ``2a+``) is met when either of its rows meets the target: the last sentence
    counts checks."""
    rel = [(r.check.split(" ")[0], r.relative) for r in rows if r.relative is not None]
    met = [c for c, x in rel if x <= target]
    checks: dict[str, bool] = {}
    for r in rows:
        if r.relative is not None:
            key = r.same_as or r.check
            checks[key] = checks.get(key, False) or r.relative <= target
    short = [f"{c} ×{(x / target) ** 2:.1f}" for c, x in sorted(rel, key=lambda cx: cx[1]) if x > target]
    absolute = [f"{r.check.split(' ')[0]} ±{r.detects:.3f}" for r in rows
                if r.detects is not None and r.relative is None]
    out = (f"sensitivity: {len(met)} of {len(rel)} rows detect a {target * 100:.0f} % relative bias "
           f"with 80 % power" + (f" ({', '.join(met)})" if met else ""))
    if short:
        out += f"; the others need this much more data: {', '.join(short)}"
    if absolute:
        out += f"; planted near 0 (absolute): {', '.join(absolute)}"
    if any(r.same_as for r in rows):
        short_checks = sorted({c.split(" ")[0] for c, ok in checks.items() if not ok})
        out += (f". By check (either world's row): {sum(checks.values())} of {len(checks)} detect it"
                + (f"; not: {', '.join(short_checks)}" if short_checks else ""))
    return out
