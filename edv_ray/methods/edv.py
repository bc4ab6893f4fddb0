"""EDV: E construction epochs over the training split, then routed inference on the test
split (after every epoch when ``edv.eval_after_each_epoch``)."""

from __future__ import annotations

from edv_ray.config import BenchmarkConfig
from edv_ray.edv.construct import run_epoch
from edv_ray.edv.infer import run_inference
from edv_ray.envs.tau2.tasks import select_tasks
from edv_ray.memory import MemoryBank


def split_tasks(bench: BenchmarkConfig, split: str, ids: list[str] | None, n: int | None) -> dict:
    return select_tasks(bench.model_copy(update={"split": split, "task_ids": ids, "num_tasks": n}))


def run_edv(ctx) -> None:
    cfg, e = ctx.cfg, ctx.cfg.edv
    train = split_tasks(cfg.benchmark, e.train_split, e.train_task_ids, e.num_train_tasks)
    test = split_tasks(cfg.benchmark, e.test_split, e.test_task_ids, e.num_test_tasks)
    bank = MemoryBank.load(ctx.run_dir / "memory", dedup_threshold=e.dedup_threshold)
    for epoch in range(e.epochs):
        unfinished = run_epoch(ctx, bank, epoch, train)
        if unfinished:
            ctx.console.print(
                f"[yellow]epoch {epoch}: {len(unfinished)} task(s) unfinished "
                f"(e.g. {unfinished[0]}) after infrastructure errors; stopping before "
                f"inference — continue with `edv run --resume {ctx.run_dir}`[/]")
            return
        ctx.console.print(f"epoch {epoch}: memory holds {len(bank)} item(s)")
        if e.eval_after_each_epoch or epoch == e.epochs - 1:
            run_inference(ctx, bank, epoch, test)
