"""The fields every stage job carries (pydantic only: cheap to import where a method
registers). A job also has ``job_id`` and ``handler`` (``"module:function"``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class JobBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    run_id: str
    run_dir: str
    epoch: int = 0
    benchmark: dict[str, Any]  # the run's benchmark section (the worker builds its env)
    domain: str
    task_id: str
    timeout_s: float = 900.0
