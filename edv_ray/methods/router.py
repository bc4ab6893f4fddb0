"""Router (the paper's ensemble baseline): the Ability Matrix picks the solver per task
type; no memory. The matrix comes from the same construction executions EDV uses (the
seeded groups of :func:`steps.draw_group`, stage ``execute``): in a run holding both
methods they are shared, not re-run."""

from __future__ import annotations

from rich.markup import escape

from edv_ray.commands import resume_command
from edv_ray.methods import steps
from edv_ray.methods.sections import RouterConfig, check_router as check
from edv_ray.methods.registry import CONSTRUCTION, INFERENCE, PICK, Method, episode_results, register

NAME = "router"
STAGE = "route"


def run(ctx, r: RouterConfig) -> None:
    """Construction executions over ``epochs``, then routing on them (epoch = the last),
    never on a matrix with errored executions: those are re-run by ``--resume`` first
    (another method re-running them would make Router's result depend on the order)."""
    from edv_ray.runtime.plan import finished_attempts

    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    used = []
    for epoch in range(r.epochs):
        plan = {(d, t.id): steps.draw_group(ctx.cfg, epoch, d, t.id, r.n_executors)
                for d, ts in train.items() for t in ts}
        eids = steps.execute(ctx, stage="execute", method=NAME, epoch=epoch, plan=plan,
                             tasks=train, trials=ctx.cfg.runtime.construction_rollouts)
        used += [e for pairs in eids.values() for _a, e in pairs]
    done = finished_attempts(ctx.run_dir, "execute")
    errored = [e for e in used if done.get(e, (0, "error"))[1] != "ok"]
    if errored:
        ctx.console.print(f"[yellow]router: {len(errored)} construction execution(s) errored; "
                          f"not routing — continue with `{escape(resume_command(ctx.run_dir))}`[/]")
        ctx.unfinished.append(f"{NAME}: {len(errored)} execution(s) to re-run")
        return
    last = r.epochs - 1
    solvers = steps.select_solvers(ctx, method=NAME, epoch=last, tasks=test)
    steps.solve(ctx, stage=STAGE, method=NAME, epoch=last, tasks=test, solvers=solvers)


register(Method(
    name=NAME, config_cls=RouterConfig, run=run, check=check,
    results_sql=episode_results(NAME, STAGE),
    phases={"execute": CONSTRUCTION, STAGE: INFERENCE},
    reward_use=lambda r: ("routing",),  # the Ability Matrix counts graded executions
    scoring=PICK, report_order=30,
    summary="Ability-Matrix routing, no memory"))
