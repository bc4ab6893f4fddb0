"""Router (the paper's ensemble baseline): the Ability Matrix picks the solver per task
type; no memory. The matrix comes from the same construction executions EDV uses (the
seeded groups of :func:`steps.draw_group`, stage ``execute``): in a run holding both
methods they are shared, not re-run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from edv_ray.methods import steps
from edv_ray.methods.registry import CONSTRUCTION, INFERENCE, Method, episode_results, register

NAME = "router"
STAGE = "route"


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_executors: int = Field(2, ge=1)  # group size per training task (as EDV's)
    epochs: int = Field(1, ge=1, le=50)  # construction executions feeding the matrix


def check(cfg, r: RouterConfig) -> None:
    if r.n_executors > len(cfg.executor_names()):
        raise ValueError(f"router.n_executors={r.n_executors} but only "
                         f"{len(cfg.executor_names())} executors")


def run(ctx, r: RouterConfig) -> None:
    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    for epoch in range(r.epochs):
        plan = {(d, t.id): steps.draw_group(ctx.cfg, epoch, d, t.id, r.n_executors)
                for d, ts in train.items() for t in ts}
        steps.execute(ctx, stage="execute", method=NAME, epoch=epoch, plan=plan, tasks=train)
    solvers = steps.route_tasks(ctx, method=NAME, epoch=0, tasks=test)
    steps.solve(ctx, stage=STAGE, method=NAME, epoch=0, tasks=test, solvers=solvers)


register(Method(
    name=NAME, config_cls=RouterConfig, run=run, check=check,
    results_sql=episode_results(NAME, STAGE),
    phases={"execute": CONSTRUCTION, STAGE: INFERENCE},
    summary="Ability-Matrix routing, no memory"))
