"""MMTB figures over missions, as the official ``analysis_result.py`` reports them.

A mission is correct when it passes both stages (:mod:`edv_ray.envs.mmtb.callgraph`,
:mod:`edv_ray.envs.mmtb.arguments`). The figures are micro accuracies over missions:

* ``overall``, and by the mission's ``type`` label: ``single`` (单), ``multi`` (多),
  ``chat`` (拒), ``clarify`` (反);
* by the gold answer's structure, over missions of EVERY type (a 单 mission with two
  calls of one tool counts as parallel): ``parallel`` (the official "combine", A^P),
  ``serial`` (A^S), ``serial_parallel`` (the official "cs", A^{S+P});
* ``optimal_path``: of the parallel and serial+parallel missions (serial ones are not
  counted), the share that is correct AND finished in the fewest turns.

Missions the official pipeline never scores (its per-dialogue error handling drops the
rest of a dialogue after a crash, see :class:`edv_ray.envs.mmtb.callgraph.Crash`) are
left out of every figure (``n_dropped``); with ``metrics: corrected`` nothing is dropped.
A figure over no mission is None where the official code prints 0 (it divides by
n + 1e-5 and prints 8 characters; the figures here are the exact ratios).
``metrics: corrected`` keeps these definitions; :data:`DEPARTURES` says, per figure, how
its missions and verdicts depart from the official ones. :func:`figure_line` and
:func:`meaning` are what the run's validity checks print (``MMTBEnv.scoring_figures``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edv_ray.envs.mmtb.data import SPECIAL, GoldNode

FIGURES = ("overall", "single", "multi", "chat", "clarify", "parallel", "serial",
           "serial_parallel", "optimal_path")


def answer_structure(nodes: Sequence[GoldNode]) -> str | None:
    """"parallel", "serial", "serial_parallel" or None (one call, or none). Calls
    (clarification and final answer left out) are grouped in list order; a call that
    depends on one of the current group opens a new group."""
    groups: list[list[int]] = []
    for n in nodes:
        if n.name in SPECIAL:
            continue
        if groups and not any(d in groups[-1] for d in n.dependency_list):
            groups[-1].append(n.idx)
        else:
            groups.append([n.idx])
    serial, parallel = len(groups) > 1, any(len(g) > 1 for g in groups)
    if serial and parallel:
        return "serial_parallel"
    return "serial" if serial else "parallel" if parallel else None


# ``metrics: corrected``: how each figure departs from the official one (the definitions
# stay the official ones, so the two modes stay comparable; what changes is which
# missions count and their verdicts). The run's scoring checks print these lines.
_VERDICTS = ("verdicts by the corrected rules (each call gets its own tool result, a "
             "clarification prunes the paths, a value or call the official check cannot "
             "score scores 0 instead of failing the mission)")
_KEPT = "missions after an official crash are scored (official: left out)"
DEPARTURES = {
    "overall": f"every mission: {_KEPT}; {_VERDICTS}",
    "single": f"单 missions: {_KEPT}; {_VERDICTS}",
    "multi": f"多 missions: {_KEPT}; {_VERDICTS}",
    "chat": f"拒 missions: {_KEPT} (a chat mission's verdict is the same in both modes)",
    "clarify": f"反 missions: {_KEPT}; {_VERDICTS}",
    "parallel": f"as official, every mission of parallel structure whatever its type; {_KEPT}; "
                f"{_VERDICTS}",
    "serial": f"as official, every mission of serial structure whatever its type; {_KEPT}; "
              f"{_VERDICTS}",
    "serial_parallel": f"as official, every mission of serial+parallel structure whatever its "
                       f"type; {_KEPT}; {_VERDICTS}",
    "optimal_path": "as official, correct AND optimal over every parallel or serial+parallel "
                    "mission; the fewest turns are counted over paths whose clarification and "
                    f"final answer stand alone (official: over all paths, where a path batching "
                    f"them makes the optimum unreachable); {_KEPT}",
}
STAGE1_DEPARTURE = ("stage-1 labels: where the official argument check raises (empty call "
                    "against non-empty gold arguments, a clarification made through the ask "
                    "tool, a value it cannot score) official relabels the mission's stage 1 "
                    "'error'; corrected keeps the walk's label")


@dataclass(frozen=True)
class MissionResult:
    kind: str  # single | multi | chat | clarify | unknown
    structure: str | None  # answer_structure of the gold nodes
    correct: bool
    optimal: bool = False
    recorded: bool = True  # False: the official pipeline would not have scored it


def breakdown(results: Sequence[MissionResult]) -> dict[str, float | None]:
    """The figures (None when a group is empty), their counts ``n_*``, ``n_dropped``."""
    kept = [r for r in results if r.recorded]
    groups: dict[str, list[bool]] = {k: [] for k in FIGURES}
    for r in kept:
        groups["overall"].append(r.correct)
        if r.kind in groups:
            groups[r.kind].append(r.correct)
        if r.structure:
            groups[r.structure].append(r.correct)
        if r.structure in ("parallel", "serial_parallel"):
            groups["optimal_path"].append(r.correct and r.optimal)
    out: dict[str, float | None] = {}
    for k, flags in groups.items():
        out[k] = sum(flags) / len(flags) if flags else None
        out[f"n_{k}"] = float(len(flags))
    out["n_dropped"] = float(len(results) - len(kept))
    return out


def stored_results(detail: dict[str, Any]) -> list[MissionResult]:
    """The missions of a stored episode's reward details (``reward_json``) as results."""
    return [MissionResult(m["kind"], m["structure"], m["correct"], m["optimal"],
                          m.get("recorded", True)) for m in detail.get("missions", [])]


_SHOWN = (("overall", "all"), ("single", "单"), ("multi", "多"), ("chat", "拒"),
          ("clarify", "反"), ("parallel", "A^P"), ("serial", "A^S"),
          ("serial_parallel", "A^{S+P}"), ("optimal_path", "optimal path"))


def figure_line(mode: str, f: dict) -> str:
    """The nine figures of a :func:`breakdown` in one line ("-" for a figure over no
    mission)."""
    shown = ", ".join(f"{label} {'-' if f[k] is None else format(f[k], '.3f')}"
                      for k, label in _SHOWN)
    return f"{mode}: {shown}; {int(f['n_overall'])} missions, {int(f['n_dropped'])} dropped"


def meaning(mode: str) -> str:
    """What the figures mean in this mode: the official definitions, or per figure how
    ``corrected`` departs from them."""
    if mode == "official":
        return ("the official analysis: A^P / A^S / A^{S+P} over every mission of that "
                "answer structure, whatever its type; optimal path = correct and optimal / "
                "every parallel and serial+parallel mission; missions after an official crash "
                "left out; stage 1 'error' where the argument check raised")
    return "corrected departs: " + "; ".join(
        f"{label}: {DEPARTURES[k]}" for k, label in _SHOWN) + f"; {STAGE1_DEPARTURE}"
