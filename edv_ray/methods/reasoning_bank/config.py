"""ReasoningBank's config section (``reasoning_bank:`` in a run config) and stage names."""

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
    retrieval_k: int = Field(1, ge=0, le=20)  # distinct past tasks whose items are injected
    max_items: int | None = Field(None, ge=1, le=10)  # default: 3, or 5 with MaTTS parallel
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
