"""ReasoningBank's stages (driver side): the per-agent stream (act → self-judge →
extract → append), evaluations on the test tasks, memory_from and contamination."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from edv_ray.commands import resume_command
from edv_ray.methods import steps
from edv_ray.methods.reasoning_bank.config import (EXECUTE, INFER, LEARN, NAME, STREAM,
                                                   STREAM_MATTS, ReasoningBankConfig)
from edv_ray.methods.reasoning_bank.store import (SEQ_EPOCH, entry_path, load_entries, version,
                                                  visible)


def bank_dir(ctx, rb: ReasoningBankConfig, agent: str) -> Path:
    """The agent's own bank; with memory_from, the source run's bank of the same agent
    (or of ``source_agent``)."""
    if ctx.cfg.memory_from:
        return ctx.run_dir / "rb" / "bank_from" / f"agent={rb.source_agent or agent}"
    return ctx.run_dir / "rb" / "bank" / f"agent={agent}"


def memory(ctx, rb: ReasoningBankConfig, before_seq: int | None, bank_of=None):
    """Retrieval for (task, agent) from what the agent's bank held before ``before_seq``
    (None = everything): the items of the k most similar distinct past tasks of the same
    domain, at most ``max_injected`` of them when set."""
    from edv_ray.runtime.spec import MemoryRequest

    bank_of = bank_of or (lambda agent: bank_dir(ctx, rb, agent))

    def fn(domain, task, agent):
        if rb.retrieval_k == 0:
            return None
        bank = bank_of(agent)
        exclude = [[domain, task.id]] if rb.leave_one_task_out else []
        seen = visible(load_entries(bank), domain, before_seq, {tuple(x) for x in exclude})
        if not seen:
            return None  # nothing to retrieve: the same episode as one without memory
        params = dict(_bank_dir=str(bank), k=rb.retrieval_k, domain=domain,
                      before_seq=before_seq, exclude=exclude)
        if rb.max_injected is not None:  # only when set: uncapped episodes keep their ids
            params["max_injected"] = rb.max_injected
        return MemoryRequest(provider="edv_ray.methods.reasoning_bank.store:rb_experiences",
                             version=version(seen), params=params)
    return fn


def stream(ctx, rb: ReasoningBankConfig, tasks: dict[str, list], stage: str, epoch: int) -> list[str]:
    """Each task in order: every agent acts (k rollouts with MaTTS) with what it learned
    before this task, then learns from it. Stops at the first task left unfinished (an
    errored episode or learning step): later tasks must see its entry, so they wait for
    ``--resume``. Returns what is unfinished."""
    from edv_ray.methods.jobkit import role_binding
    from edv_ray.methods.reasoning_bank.learn import RBLearnJob

    cfg, agents = ctx.cfg, ctx.cfg.executor_names()
    # the training stream is construction; the test stream (RB's own setting) evaluates
    rollouts = cfg.runtime.construction_rollouts if stage == EXECUTE else cfg.runtime.trials
    k = rb.matts_k if rb.matts == "parallel" else rollouts
    ordered = [(d, t) for d, ts in tasks.items() for t in ts]
    for i, (domain, task) in enumerate(ordered, 1):
        seq = epoch * SEQ_EPOCH + i
        eids = steps.execute(ctx, stage=stage, method=NAME, epoch=epoch,
                             plan={(domain, task.id): agents}, tasks={domain: [task]},
                             memory=memory(ctx, rb, seq), trials=k,
                             label=f"rb e{epoch} {stage} {i}/{len(ordered)}")
        jobs = []
        for agent in agents:
            if entry_path(ctx.run_dir, agent, epoch, domain, task.id, stage).exists():
                continue
            jobs.append(RBLearnJob(
                run_id=ctx.run_id, run_dir=str(ctx.run_dir), epoch=epoch,
                benchmark=cfg.benchmark.model_dump(mode="json"), domain=domain,
                task_id=task.id, stage=stage, agent=agent, seq=seq,
                binding=role_binding(ctx, agent, LEARN),
                episode_ids=[e for a, e in eids[(domain, task.id)] if a == agent],
                max_items=rb.items_per_task, retries=rb.retries,
                extract_temperature=rb.extract_temperature, contrast=rb.matts == "parallel",
                timeout_s=cfg.runtime.episode_timeout_s))
        results = steps.run_jobs(ctx, jobs, f"rb learn {i}/{len(ordered)}")
        bad = [r["job_id"] for r in results if r.get("status") != "ok"]
        if bad:
            ctx.unfinished.extend(bad)
            ctx.console.print(f"[yellow]reasoning_bank: task {i}/{len(ordered)} unfinished; the "
                              f"stream stops here — continue with `{escape(resume_command(ctx.run_dir))}`[/]")
            return bad
    return []


def run(ctx, rb: ReasoningBankConfig) -> None:
    from edv_ray.methods import contamination as C

    if rb.stream_on_test:
        stream(ctx, rb, steps.test_tasks(ctx), STREAM_MATTS if rb.matts == "parallel" else STREAM, 0)
        return
    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    plan = {(d, t.id): ctx.cfg.executor_names() for d, ts in test.items() for t in ts}
    if ctx.cfg.memory_from:
        C.copy_source(ctx.cfg.memory_from, "rb/bank", ctx.run_dir / "rb" / "bank_from")
        _check_source_banks(ctx, rb)
        steps.execute(ctx, stage=INFER, method=NAME, epoch=0, plan=plan, tasks=test,
                      memory=memory(ctx, rb, None))
        contaminate_and_infer(ctx, rb, 0, test, plan)
        return
    for epoch in range(rb.epochs):
        if stream(ctx, rb, train, EXECUTE, epoch):
            return
        if rb.eval_after_each_epoch or epoch == rb.epochs - 1:
            steps.execute(ctx, stage=INFER, method=NAME, epoch=epoch, plan=plan, tasks=test,
                          memory=memory(ctx, rb, (epoch + 1) * SEQ_EPOCH))
    contaminate_and_infer(ctx, rb, rb.epochs - 1, test, plan)


def _check_source_banks(ctx, rb: ReasoningBankConfig) -> None:
    from edv_ray.config import ConfigError

    src = ctx.run_dir / "rb" / "bank_from"
    have = sorted(p.name.removeprefix("agent=") for p in src.glob("agent=*"))
    missing = [a for a in ctx.cfg.executor_names() if not bank_dir(ctx, rb, a).is_dir()]
    if missing:
        raise ConfigError(f"memory_from {ctx.cfg.memory_from}: no ReasoningBank bank for agent(s) "
                          f"{missing} (the source has {have}); set reasoning_bank.source_agent")


def contaminate_and_infer(ctx, rb: ReasoningBankConfig, epoch: int, test, plan) -> None:
    """Each contamination share: wrong twins appended to host entries of every agent's
    frozen bank (same domain, retrieved by the same queries); the test tasks run again."""
    from edv_ray.methods.contamination import condition
    from edv_ray.methods.reasoning_bank.contamination import contaminated_banks

    for share, bank_of in contaminated_banks(ctx, rb, lambda a: bank_dir(ctx, rb, a)):
        steps.execute(ctx, stage=INFER, method=NAME, epoch=epoch, plan=plan, tasks=test,
                      memory=memory(ctx, rb, None, bank_of), condition=condition(share))
