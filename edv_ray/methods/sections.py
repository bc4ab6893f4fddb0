"""The config sections of the single-module methods (``no_memory:``, ``router:``,
``judge:`` in a run config) and their pool checks: pydantic only, so a config loads
without the methods' run code (:mod:`edv_ray.plugins` names these by string)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NoMemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_executors: int = Field(2, ge=1)  # group size per training task (as EDV's)
    epochs: int = Field(1, ge=1, le=50)  # construction executions feeding the matrix


def check_router(cfg, r: RouterConfig) -> None:
    if r.n_executors > len(cfg.executor_names()):
        raise ValueError(f"router.n_executors={r.n_executors} but only "
                         f"{len(cfg.executor_names())} executors")


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    retries: int = Field(2, ge=0, le=5)


def check_judge(cfg, section: JudgeConfig) -> None:
    if cfg.roles.judge is None:
        raise ValueError("method judge needs roles.judge (the agent that picks an outcome)")
