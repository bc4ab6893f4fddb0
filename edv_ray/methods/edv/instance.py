"""EDV registered under more than one name: ``edv`` (the paper's Figure 3: the distiller
and the verifiers see each run's graded outcome) and ``edv_blind`` (the same paradigm
with the benchmark's reward hidden from both — the row that compares with ReasoningBank,
which learns from its own self-judged labels, on supervision as well as roles).

An :class:`Instance` names everything one registered EDV method owns in a run, so two
of them in one run never share a folder, a stage-job row, a call row's stage or a view:

* stage tables: ``edv/<table>/`` — ``edv_blind/<table>/``;
* banks: ``memory/``, ``memory_snapshots/``, ``memory_contaminated/`` —
  ``edv_blind/memory/``, ``edv_blind/memory_snapshots/``, ``edv_blind/memory_contaminated/``;
* stage-job stages (call rows, token phases): ``distill``, ``verify``, ``verify_audit`` —
  ``distill_edv_blind``, ``verify_edv_blind``, ``verify_audit_edv_blind``;
* views: ``candidates``, ``votes``, ``memory_items``, … — ``edv_blind_candidates``, …;
* routing: ``routing/method=edv`` — ``routing/method=edv_blind`` (as every method).

Episodes keep the stages ``execute`` and ``infer``: an episode's identity decides what is
shared (:func:`edv_ray.runtime.spec.episode_id`). Epoch 0's executions (same seeded
groups, no memory) are the same episodes for every instance — and Router — and run
once, charged in full to each; an episode that reads an instance's bank carries the
instance's name in its memory key, so it is never another instance's episode.
``edv`` keeps its names: run folders written before instances existed read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import model_validator

from edv_ray.methods.edv.config import NAME, EDVConfig

BLIND_NAME = "edv_blind"
# the benchmark's reward, where a method can learn from it (Method.reward_use)
DISTILL, VERIFY, ROUTING = "distill", "verify", "routing"


@dataclass(frozen=True)
class Instance:
    name: str

    @property
    def main(self) -> bool:
        """The ``edv`` instance (bare names, as before instances)."""
        return self.name == NAME

    def stage(self, base: str) -> str:
        """The stage a stage job of kind ``base`` records its calls under."""
        return base if self.main else f"{base}_{self.name}"

    def view(self, base: str) -> str:
        """The name of this instance's view ``base`` (``votes`` → ``edv_blind_votes``)."""
        return base if self.main else f"{self.name}_{base}"

    def tables_dir(self, run_dir: str | Path) -> Path:
        """The folder of the per-task stage tables (candidates, votes, …)."""
        return Path(run_dir) / self.name

    @property
    def memory_rel(self) -> str:
        """The bank's folder relative to the run folder (``memory_from`` copies it)."""
        return "memory" if self.main else f"{self.name}/memory"

    def memory_dir(self, run_dir: str | Path, what: str = "memory") -> Path:
        """``memory``, ``memory_snapshots`` or ``memory_contaminated`` of this instance."""
        return Path(run_dir) / what if self.main else Path(run_dir) / self.name / what


EDV = Instance(NAME)
BLIND = Instance(BLIND_NAME)
INSTANCES = (EDV, BLIND)  # every registered EDV method


def instance(name: str) -> Instance | None:
    """The EDV instance registered as ``name`` (None: not an EDV method)."""
    return next((i for i in INSTANCES if i.name == name), None)


class EDVBlindConfig(EDVConfig):
    """``edv_blind:``: EDV's section (every switch as ``edv:``) with the graded outcome
    hidden from the distiller and the verifiers; showing it is refused (that is ``edv``)."""

    distiller_sees_reward: bool = False
    verifiers_see_reward: bool = False

    @model_validator(mode="after")
    def _blind(self) -> "EDVBlindConfig":
        shown = [f for f in ("distiller_sees_reward", "verifiers_see_reward") if getattr(self, f)]
        if shown:
            raise ValueError(f"{BLIND_NAME} hides the reward: {', '.join(shown)} must be false "
                             f"(use {NAME} to show it)")
        return self


def reward_use(e: EDVConfig) -> tuple[str, ...]:
    """Where an EDV section learns from the benchmark's reward: the distiller (graded
    runs, and the contrast gate on them), the verifiers, and the Ability Matrix that routes
    inference (graded construction executions; not with a fixed solver)."""
    return tuple(part for part, used in ((DISTILL, e.distiller_sees_reward),
                                         (VERIFY, e.verifiers_see_reward),
                                         (ROUTING, e.routing == "ability_matrix")) if used)
