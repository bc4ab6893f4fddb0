"""Validity checks: every run shows, with the figure behind each, that it measured what
its config says — printed in the run report (``report/validity.csv``) and in
``edv compare`` (which refuses a comparison whose checks fail unless
``--allow-invalid``).

A check is a function ``(con, run_dir) -> list[Check]`` over the run's DuckDB views
(:func:`edv_ray.results.views.connect`), registered in :data:`CHECKS`. It returns no
row when it does not apply to the run (e.g. no contamination asked), ``ok=True`` with
its figure when it passes, ``ok=False`` with the reason when it fails. Checks read only
what the run stored; they never re-run anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Check:
    name: str  # short id, e.g. "seed_diversity"
    ok: bool
    figure: str  # the number(s) behind the verdict, e.g. "3 distinct / 3 agents"
    detail: str = ""  # why it failed, or what was checked
    method: str = ""  # the method it concerns ("" = the run)

    def row(self) -> dict:
        return asdict(self)


CheckFn = Callable[[object, Path], list[Check]]
CHECKS: list[CheckFn] = []


def check(fn: CheckFn) -> CheckFn:
    """Register a check (decorator)."""
    CHECKS.append(fn)
    return fn


def run_checks(run_dir: str | Path, con=None) -> list[Check]:
    """Every registered check over one run; a check that crashes is itself a failed
    check (named), never a silent pass."""
    from edv_ray.results.views import connect

    run_dir = Path(run_dir)
    _load_builtin_checks()
    con = con or connect(run_dir)
    out: list[Check] = []
    for fn in CHECKS:
        try:
            out += fn(con, run_dir)
        except Exception as err:  # noqa: BLE001 - a broken check must show, not pass
            out.append(Check(fn.__name__, False, "-", f"check crashed: {type(err).__name__}: {err}"))
    return out


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


_BUILTIN = ("edv_ray.report.validity_checks", "edv_ray.report.mind2web_checks",
            "edv_ray.report.scoring_checks", "edv_ray.report.validity_evidence")


def _load_builtin_checks() -> None:
    import importlib

    for mod in _BUILTIN:
        importlib.import_module(mod)
