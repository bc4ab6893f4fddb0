"""NM: every executor runs every selected task with no memory (stage ``eval``)."""

from __future__ import annotations

from edv_ray.runtime.plan import make_spec, pending_specs


def run_no_memory(ctx) -> None:
    cfg = ctx.cfg
    specs = [
        make_spec(cfg, ctx.run_id, ctx.pool, stage="eval", domain=domain, task=task,
                  trial=trial, agent=agent)
        for domain, tasks in ctx.tasks.items()
        for task in tasks
        for trial in range(cfg.runtime.trials)
        for agent in cfg.executor_names()
    ]
    todo = pending_specs(specs, ctx.run_dir)
    if len(todo) < len(specs):
        ctx.console.print(f"resume: {len(specs) - len(todo)} of {len(specs)} episodes already done")
    ctx.runner.run(todo, label="eval", show_progress=ctx.show_progress)
