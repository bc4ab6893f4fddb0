"""ReasoningBank's config section (``reasoning_bank:`` in a run config) and stage names.

Units: ``retrieval_k`` counts distinct *past tasks* (the paper's k, default 1), and every
item of each such task is injected — up to ``items_per_task`` per rollout learned from
(each rollout is extracted: ``runtime.construction_rollouts`` on the training stream,
``runtime.trials`` on the test stream; MaTTS parallel gives one self-contrast set). EDV's
``retrieval_k`` counts *items*. ``max_injected`` caps the items one episode receives (the
most similar task's items first), so a sweep can pair the two methods on items injected;
the report's ``items_injected`` table gives what each episode got."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME = "reasoning_bank"
EXECUTE, INFER, LEARN = "rb_execute", "rb_infer", "rb_learn"
STREAM, STREAM_MATTS = "rb_stream", "rb_stream_matts"  # RB's own setting (test stream)


class ReasoningBankConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(1, ge=1, le=50)
    eval_after_each_epoch: bool = False  # a test evaluation after every epoch (epoch curve)
    retrieval_k: int = Field(1, ge=0, le=20)  # distinct PAST TASKS whose items are all injected
    max_items: int | None = Field(None, ge=1, le=10)  # per rollout: default 3 (5 with MaTTS parallel)
    # at most this many ITEMS injected per episode (None: all items of the k tasks)
    max_injected: int | None = Field(None, ge=1, le=200)
    retries: int = Field(2, ge=0, le=5)
    extract_temperature: float = Field(1.0, ge=0.0, le=2.0)
    leave_one_task_out: bool = True
    stream_on_test: bool = False
    matts: Literal["none", "parallel", "sequential"] = "none"
    matts_k: int = Field(3, ge=2, le=10)
    # memory_from: whose bank each agent uses (default: the source's bank of the same name)
    source_agent: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "ReasoningBankConfig":
        if self.matts == "sequential":
            raise ValueError("matts=sequential (re-examining inside an episode) is not "
                             "implemented; use matts: parallel or none")
        if self.stream_on_test and self.eval_after_each_epoch:
            raise ValueError("stream_on_test learns on the test stream: eval_after_each_epoch "
                             "does not apply")
        return self

    @property
    def items_per_task(self) -> int:
        """The paper's defaults: ≤ 3 items per trajectory, ≤ 5 from MaTTS self-contrast."""
        return self.max_items or (5 if self.matts == "parallel" else 3)
