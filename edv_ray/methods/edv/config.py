"""EDV's own config section (``edv:`` in a run config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# memory.retrieval's defaults, kept here so the section loads without the memory code
# (numpy, the bank): tests/test_light_start.py checks the two agree
DEFAULT_K, DEFAULT_TAU = 3, 0.3

NAME = "edv"
INFER_STAGE = "infer"
AUDIT_STAGE = "verify_audit"  # poison votes' calls (phase: audit, not construction)
# contrast: graded — the group's rewards lie at least this far apart (max − min). 0.1 keeps
# τ²-bench (rewards 0 or 1) on exactly the binary gate's groups; counts one more step right
# on a Mind2Web task of up to 10 steps (reward = step success rate; the dataset averages
# about 7 actions a task) and one more mission right in an MMTB dialogue of up to 10
# missions (reward = share of missions right); smaller gaps (one step of a longer task) do not
CONTRAST_MARGIN = 0.1


class EDVConfig(BaseModel):
    """The paradigm as configuration (every switch the paper ablates).

    distill_by: third_party (a pool member outside the group) | executor (one of the
      group) | self (the single executor distills its own run).
    verify_by: executors (each executor votes with its own trajectory) | distiller |
      external (a pool member outside group and distiller) | self | judge (``roles.judge``
      alone decides — an ablation, not the paper's Judge baseline) | none (auto-approve).
    Routing: every verifier approves → shared bank; some → each approver's private bank;
    none (or no vote at all) → discarded.
    Reward visibility: ``distiller_sees_reward`` / ``verifiers_see_reward`` decide whether
    the graded outcome (✓/✗) of each run is shown; the paper's Figure 3 shows it to both.
    Task selections (train / test) live in ``benchmark``; prompt budgets follow each
    model's ``n_ctx`` (the full policy always goes in; transcripts are shortened first).
    """

    model_config = ConfigDict(extra="forbid")

    n_executors: int = Field(2, ge=1)
    distill_by: Literal["third_party", "executor", "self"] = "third_party"
    verify_by: Literal["executors", "distiller", "external", "self", "judge", "none"] = "executors"
    require_contrast: bool = True  # the contrast gate: distill only groups that contrast
    # what contrasts (for a distiller shown the grades; a reward-blind one's gate compares
    # what the runs did): graded — rewards CONTRAST_MARGIN apart; binary — a success and a failure
    contrast: Literal["graded", "binary"] = "graded"
    contrast_margin: float = Field(CONTRAST_MARGIN, gt=0.0, le=1.0)
    distiller_sees_reward: bool = True
    verifiers_see_reward: bool = True
    max_candidates: int = Field(3, ge=1, le=10)
    distill_retries: int = Field(2, ge=0, le=5)
    verify_retries: int = Field(1, ge=0, le=5)
    epochs: int = Field(1, ge=1, le=50)
    retrieve_during_construction: bool = True
    eval_after_each_epoch: bool = False
    retrieval_k: int = Field(DEFAULT_K, ge=0, le=20)
    retrieval_tau: float = Field(DEFAULT_TAU, ge=-1.0, le=1.0)
    leave_one_task_out: bool = True
    # which banks inference and memory-guided construction read: both (shared first, then
    # the solver's private bank — the paper), shared only, or private only (the paper's
    # memory-hierarchy ablation)
    retrieval_scope: Literal["both", "shared", "private"] = "both"
    dedup_threshold: float = Field(0.92, gt=0.0, le=1.0)
    # the forward pass that embeds what a stage admits (on the workers): auto — bfloat16
    # where the worker's CPU computes it natively (AVX512-BF16 / AMX; ~1.7× faster, cosine
    # to the float32 vector ~0.99998), else float32. Retrieval queries are float32 always.
    item_embedding_precision: Literal["auto", "float32", "bfloat16"] = "auto"
    # ability_matrix: the Model Selector (the paper); fixed: ``fixed_solver`` for every
    # task; random: an executor drawn per task from the run's ``seed`` and the task (no
    # Ability Matrix; reproducible, recorded in routing/ with basis "random")
    routing: Literal["ability_matrix", "fixed", "random"] = "ability_matrix"
    fixed_solver: str | None = None
    poison_per_task: int = Field(1, ge=0, le=10)  # known-wrong candidates injected into Verify
    poison_to_memory: bool = False  # measure admission without contaminating the banks

    @model_validator(mode="after")
    def _check_paradigm(self) -> "EDVConfig":
        if self.distill_by == "self" and self.n_executors != 1:
            raise ValueError("distill_by=self needs n_executors=1")
        if self.verify_by == "self" and self.distill_by != "self":
            raise ValueError("verify_by=self means the executor that distilled votes: use distill_by=self")
        if self.require_contrast and self.n_executors < 2:
            raise ValueError("require_contrast needs n_executors>=2 (one run has nothing to contrast with)")
        if self.contrast == "binary" and self.contrast_margin != CONTRAST_MARGIN:
            raise ValueError("edv.contrast_margin applies to contrast=graded, not binary")
        if self.routing == "fixed" and not self.fixed_solver:
            raise ValueError("routing=fixed needs fixed_solver")
        return self




def check_edv_pool(cfg, e: EDVConfig) -> None:
    """Pool-dependent checks (the section alone cannot see the pool)."""
    names, execs = [a.name for a in cfg.agents], cfg.executor_names()
    if e.n_executors > len(execs):
        raise ValueError(f"edv.n_executors={e.n_executors} but only {len(execs)} executors")
    outside = len(names) - e.n_executors  # worst case: the group holds no non-executor
    if e.distill_by == "third_party":
        # every possible group must leave a distiller outside it: a distiller that is no
        # executor, or more executor-distillers than one group can hold
        dist = list(cfg.roles.distillers) or names
        free = [d for d in dist if d not in execs]
        if not free and len(dist) <= e.n_executors:
            raise ValueError(
                f"distill_by=third_party: a group of {e.n_executors} executor(s) can hold every "
                f"distiller {dist}; add a distiller outside the executors")
    if e.verify_by == "external" and outside < 1 + (e.distill_by == "third_party"):
        raise ValueError("verify_by=external needs a pool member outside the group and the distiller")
    if e.verify_by == "judge" and cfg.roles.judge is None:
        raise ValueError("edv.verify_by=judge needs roles.judge")
    if e.fixed_solver is not None and e.fixed_solver not in names:
        raise ValueError(f"edv.fixed_solver names unknown agent {e.fixed_solver!r}")
