"""Stage 2 — routed inference: select the solver, retrieve, run with experiences, grade."""

from __future__ import annotations

from edv_ray.edv.construct import retrieval_for
from edv_ray.edv.selector import select_solver
from edv_ray.envs.tau2.tasks import task_type
from edv_ray.memory import MemoryBank
from edv_ray.results.views import connect
from edv_ray.runtime.plan import make_spec, pending_specs


def run_inference(ctx, bank: MemoryBank, epoch: int, test: dict[str, list]) -> None:
    cfg, e = ctx.cfg, ctx.cfg.edv
    matrix = connect(ctx.run_dir, matrix_stages=("execute",)).execute(
        "SELECT agent, task_type, attempts, score FROM ability_matrix").fetchdf().to_dict("records")
    specs = []
    for domain, tasks in test.items():
        for task in tasks:
            tt = task_type(domain, task.id, cfg.benchmark.task_type_key)
            solver = (e.fixed_solver if e.routing == "fixed"
                      else select_solver(matrix, tt, cfg.executor_names()))
            mem = retrieval_for(ctx, bank, domain, task, solver)
            for trial in range(cfg.runtime.trials):
                specs.append(make_spec(cfg, ctx.run_id, ctx.pool, stage="infer", domain=domain,
                                       task=task, trial=trial, agent=solver, epoch=epoch, **mem))
    ctx.runner.run(pending_specs(specs, ctx.run_dir), label=f"epoch {epoch} infer",
                   show_progress=ctx.show_progress)
