"""EDV (the paper's method): E construction epochs over the training tasks —
Execute (a seeded group) → Distill (a third party contrasts the runs) → Verify (the
executors vote) → shared / private banks — then routed inference on the test tasks:
the Ability Matrix picks the solver, which retrieves from the shared bank first, then
its private bank (after every epoch when ``edv.eval_after_each_epoch``)."""

from __future__ import annotations

from edv_ray.edv.config import EDVConfig, check_edv_pool
from edv_ray.methods import steps
from edv_ray.methods.registry import CONSTRUCTION, INFERENCE, Method, register

NAME = "edv"
INFER_STAGE = "infer"


def memory_fn(ctx, e: EDVConfig):
    """Retrieval for (task, solver): shared first, then the solver's private bank,
    never an item distilled from this task (leave-one-task-out, default on)."""
    if e.retrieval_k == 0:
        return None
    from edv_ray.runtime.spec import MemoryRequest

    def fn(domain, task, agent):
        return MemoryRequest(provider="edv_ray.edv.retrieval:edv_experiences", params=dict(
            bank_dir=str(ctx.run_dir / "memory"), solver=agent, k=e.retrieval_k,
            tau=e.retrieval_tau, domain=domain, dedup_threshold=e.dedup_threshold,
            exclude_task_ids=[task.id] if e.leave_one_task_out else []))
    return fn


def run(ctx, e: EDVConfig) -> None:
    from edv_ray.edv.construct import run_epoch
    from edv_ray.memory import MemoryBank

    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    bank = MemoryBank.load(ctx.run_dir / "memory", dedup_threshold=e.dedup_threshold)
    for epoch in range(e.epochs):
        unfinished = run_epoch(ctx, e, bank, epoch, train)
        if unfinished:
            ctx.console.print(
                f"[yellow]epoch {epoch}: {len(unfinished)} task(s) unfinished "
                f"(e.g. {unfinished[0]}) after infrastructure errors; stopping before "
                f"inference — continue with `edv run --resume {ctx.run_dir}`[/]")
            ctx.unfinished.extend(unfinished)
            return
        ctx.console.print(f"epoch {epoch}: memory holds {len(bank)} item(s)")
        if e.eval_after_each_epoch or epoch == e.epochs - 1:
            fixed = e.fixed_solver if e.routing == "fixed" else None
            solvers = steps.route_tasks(ctx, method=NAME, epoch=epoch, tasks=test, fixed=fixed)
            steps.solve(ctx, stage=INFER_STAGE, method=NAME, epoch=epoch, tasks=test,
                        solvers=solvers, memory=memory_fn(ctx, e))


def add_views(con, run_dir) -> None:
    from edv_ray.edv.views import add_edv_views

    add_edv_views(con, run_dir)


register(Method(
    name=NAME, config_cls=EDVConfig, run=run, check=check_edv_pool, add_views=add_views,
    results_sql=f"""SELECT run_id, '{NAME}' AS method, agent, epoch, domain, task_id, trial,
                           status, success, reward, episode_id
                    FROM episodes WHERE stage = '{INFER_STAGE}'""",
    admitted_sql=f"SELECT '{NAME}' AS method, bank, count(*) AS items FROM memory_items GROUP BY bank",
    phases={"execute": CONSTRUCTION, "distill": CONSTRUCTION, "verify": CONSTRUCTION,
            INFER_STAGE: INFERENCE},
    summary="Execute–Distill–Verify with shared/private banks and routed inference"))
