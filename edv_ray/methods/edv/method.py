"""EDV (the paper's method): E construction epochs over the training tasks —
Execute (a seeded group) → Distill (a third party contrasts the runs) → Verify (the
executors vote) → shared / private banks — then routed inference on the test tasks:
the Ability Matrix picks the solver, which retrieves from the shared bank first, then
its private bank (after every epoch when ``edv.eval_after_each_epoch``).

Memory is read from frozen snapshots (:mod:`edv_ray.methods.edv.banks`): epoch E's
inference and epoch E+1's memory-guided executions read the bank as it was when epoch E
ended. With ``contamination``, the last snapshot gets contaminated copies and the same
routed test tasks run again on each (``edv+poison@S`` in ``method_results``)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from edv_ray.commands import resume_command
from edv_ray.methods import steps
from edv_ray.methods.edv import banks
from edv_ray.methods.edv.config import INFER_STAGE, EDVConfig
from edv_ray.methods.edv.instance import EDV, Instance
from edv_ray.methods.edv.retrieval import memory_fn


def run(ctx, e: EDVConfig, inst: Instance = EDV) -> None:
    """EDV registered as ``inst`` (its folders, stages and views: ``instance.py``)."""
    from edv_ray.memory import MemoryBank
    from edv_ray.methods.edv.construct import run_epoch

    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    if ctx.cfg.memory_from:  # inference only, from another run's banks and Ability Matrix
        _from_source(ctx, e, test, inst)
        return
    bank = MemoryBank.load(inst.memory_dir(ctx.run_dir), dedup_threshold=e.dedup_threshold)
    for epoch in range(e.epochs):
        unfinished = run_epoch(ctx, e, bank, epoch, train, inst)
        if unfinished:
            ctx.console.print(
                f"[yellow]{inst.name} epoch {epoch}: {len(unfinished)} task(s) unfinished "
                f"(e.g. {unfinished[0]}) after infrastructure errors; stopping before "
                f"inference — continue with `{escape(resume_command(ctx.run_dir))}`[/]")
            ctx.unfinished.extend(unfinished)
            return
        info = banks.freeze(inst.memory_dir(ctx.run_dir), banks.snapshot_dir(ctx.run_dir, epoch, inst),
                            e.dedup_threshold)
        ctx.console.print(f"{inst.name} epoch {epoch}: memory holds {info['items']} item(s)")
        if e.eval_after_each_epoch or epoch == e.epochs - 1:
            solvers = infer(ctx, e, epoch, test, inst=inst)
    contaminate_and_infer(ctx, e, e.epochs - 1, test, solvers, inst)


def _from_source(ctx, e: EDVConfig, test, inst: Instance = EDV) -> None:
    """``memory_from``: the source run's final bank and the Ability Matrix it routed with."""
    from edv_ray.methods import ability_matrix
    from edv_ray.methods import contamination as C

    C.copy_source(ctx.cfg.memory_from, inst.memory_rel, inst.memory_dir(ctx.run_dir))
    banks.freeze(inst.memory_dir(ctx.run_dir), banks.snapshot_dir(ctx.run_dir, 0, inst),
                 e.dedup_threshold)
    matrix = ability_matrix.stored_matrix(ctx.cfg.memory_from, inst.name)
    if matrix is None and e.routing == "ability_matrix":
        ctx.console.print(f"[yellow]memory_from {escape(str(ctx.cfg.memory_from))}: it stored no {inst.name} "
                          "Ability Matrix; routing falls back to the prior[/]")
    solvers = infer(ctx, e, 0, test, matrix_from=matrix, inst=inst)
    contaminate_and_infer(ctx, e, 0, test, solvers, inst)


def infer(ctx, e: EDVConfig, epoch: int, test: dict[str, list],
          matrix_from: Path | None = None, inst: Instance = EDV) -> dict:
    """Stage 2 on snapshot ``epoch``: select solvers, retrieve, run. Returns the solvers."""
    fixed = e.fixed_solver if e.routing == "fixed" else None
    solvers = steps.select_solvers(ctx, method=inst.name, epoch=epoch, tasks=test, fixed=fixed,
                                   matrix_from=matrix_from,
                                   random_seed=ctx.cfg.seed if e.routing == "random" else None)
    frozen = banks.snapshot_dir(ctx.run_dir, epoch, inst)
    steps.solve(ctx, stage=INFER_STAGE, method=inst.name, epoch=epoch, tasks=test,
                solvers=solvers, memory=memory_fn(ctx, e, frozen, banks.version_of(frozen), inst))
    return solvers


def contaminate_and_infer(ctx, e: EDVConfig, epoch: int, test: dict[str, list],
                          solvers: dict, inst: Instance = EDV) -> None:
    """Each contamination share: wrong twins of clean items of the frozen bank, each placed
    beside its host (same bank — shared, or the owner's private bank — and domain), so
    every solver meets poison in proportion to what it can retrieve; the same routed test
    tasks run on the copy."""
    from edv_ray.memory import MemoryBank, MemoryItem
    from edv_ray.methods import contamination as C

    if not ctx.cfg.contamination:
        return
    frozen = banks.snapshot_dir(ctx.run_dir, epoch, inst)
    items = list(MemoryBank.load(frozen, dedup_threshold=e.dedup_threshold))
    by_id = {i.item_id: i for i in items}
    clean: dict[str, list[C.Host]] = {}
    for i in items:
        clean.setdefault(i.domain or "", []).append(C.Host(
            i.domain or "", i.item_id, (i.source_task_ids or [""])[0], i.title, i.when_to_use, i.rule,
            where={"owner": i.owner if i.bank == "private" else None}))
    for share in ctx.cfg.contamination:
        hosts = C.pick_hosts(clean, share, ctx.cfg.seed, inst.name)
        twins = C.all_twins(ctx, inst.name, hosts, share)
        if twins is None:
            continue
        poison = []
        for (host_id, _copy), t in sorted(twins.items()):
            host = by_id[host_id]
            poison.append(MemoryItem(  # beside its host: same bank, owner and domain
                bank=host.bank, owner=host.owner, title=t["title"], when_to_use=t["when_to_use"],
                rule=t["rule"],
                tags=["contamination"], domain=host.domain,
                source_task_ids=list(host.source_task_ids), epoch=host.epoch,
                distiller="contamination", method=inst.name,
                supporting_trajectory_ids=[], rejected_trajectory_ids=[host_id]))
        dest = inst.memory_dir(ctx.run_dir, "memory_contaminated") / C.condition(share)
        info = banks.contaminated_copy(frozen, dest, poison, e.dedup_threshold)
        placed = [dict(domain=i.domain or "", bank=i.bank, owner=i.owner, item_id=i.item_id,
                       host_item_id=(i.rejected_trajectory_ids or [None])[0], title=i.title,
                       rule=i.rule, source=_source_of(i, twins))
                  for i in MemoryBank.load(dest, dedup_threshold=1.0) if i.distiller == "contamination"]
        C.record(ctx.run_dir, inst.name, share,
                 C.share_rows(ctx.run_id, inst.name, share, clean, placed),
                 C.exposure_rows(ctx.run_id, inst.name, share, clean, placed,  # per solver
                                 sorted(set(solvers.values())) or ctx.cfg.executor_names()))
        reached = {d: sum(p["domain"] == d for p in placed) / max(1, len(clean[d]) + sum(
            p["domain"] == d for p in placed)) for d in clean}
        ctx.console.print(f"{inst.name} contamination {share:g}: {len(placed)} twin(s) beside their hosts; "
                          "share reached " + ", ".join(f"{d} {r:.3f}" for d, r in sorted(reached.items())))
        steps.solve(ctx, stage=INFER_STAGE, method=inst.name, epoch=epoch, tasks=test,
                    solvers=solvers, memory=memory_fn(ctx, e, dest, info, inst),
                    condition=C.condition(share))


def _source_of(item, twins: dict) -> str:
    for t in twins.values():
        if item.rule.startswith(t["rule"]):
            return t["source"]
    return "model"


def add_views(con, run_dir, inst: Instance = EDV) -> None:
    from edv_ray.methods.edv.views import add_edv_views

    add_edv_views(con, run_dir, inst)
