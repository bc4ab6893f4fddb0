"""EDV (the paper's method): E construction epochs over the training tasks —
Execute (a seeded group) → Distill (a third party contrasts the runs) → Verify (the
executors vote) → shared / private banks — then routed inference on the test tasks:
the Ability Matrix picks the solver, which retrieves from the shared bank first, then
its private bank (after every epoch when ``edv.eval_after_each_epoch``)."""

from __future__ import annotations

from edv_ray.methods import steps
from edv_ray.methods.edv.config import INFER_STAGE, NAME, EDVConfig
from edv_ray.methods.edv.retrieval import memory_fn


def contaminate(ctx, bank, share: float) -> None:
    """Inject poison rules into the shared bank until they are ``share`` of it."""
    from edv_ray.memory import MemoryItem
    from edv_ray.methods import contamination as C

    clean = [i for i in bank.items(bank="shared") if i.distiller != "contamination"]
    pool = [(d, p) for d in ctx.cfg.benchmark.domains for p in C.load_poison(d)]
    n = C.n_to_inject(len(clean), share, len(pool))
    items = [MemoryItem(bank="shared", title=p["title"], when_to_use=p["when_to_use"],
                        rule=p["rule"], tags=[*p.get("tags", []), "contamination"], domain=d,
                        source_task_ids=[f"contamination-{i}"], distiller="contamination",
                        method=NAME) for i, (d, p) in enumerate(pool[:n])]
    if items:
        bank.add(items)
        bank.save()
    reached = n / (len(clean) + n) if n else 0.0
    C.record(ctx.run_dir, NAME, [dict(run_id=ctx.run_id, bank="shared", owner=None, domain=i.domain,
                                      item_id=i.item_id, rule=i.rule, share_asked=share,
                                      share_reached=reached) for i in items])
    ctx.console.print(f"contamination: {n} poison item(s) in the shared bank "
                      f"(share {reached:.2f}, asked {share:.2f})")


def run(ctx, e: EDVConfig) -> None:
    from edv_ray.methods.edv.construct import run_epoch
    from edv_ray.memory import MemoryBank
    from edv_ray.methods import contamination as C

    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    if ctx.cfg.memory_from:  # inference only, from another run's banks
        C.copy_source(ctx.cfg.memory_from, "memory", ctx.run_dir / "memory")
    bank = MemoryBank.load(ctx.run_dir / "memory", dedup_threshold=e.dedup_threshold)
    for epoch in range(0 if ctx.cfg.memory_from else e.epochs):
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
            infer(ctx, e, bank, epoch, test)
    if ctx.cfg.memory_from:
        infer(ctx, e, bank, 0, test)


def infer(ctx, e: EDVConfig, bank, epoch: int, test: dict[str, list]) -> None:
    """Stage 2: (contaminate,) route, retrieve, run."""
    if ctx.cfg.contamination > 0:
        contaminate(ctx, bank, ctx.cfg.contamination)
    fixed = e.fixed_solver if e.routing == "fixed" else None
    solvers = steps.route_tasks(ctx, method=NAME, epoch=epoch, tasks=test, fixed=fixed)
    steps.solve(ctx, stage=INFER_STAGE, method=NAME, epoch=epoch, tasks=test,
                solvers=solvers, memory=memory_fn(ctx, e))


def add_views(con, run_dir) -> None:
    from edv_ray.methods.edv.views import add_edv_views

    add_edv_views(con, run_dir)


