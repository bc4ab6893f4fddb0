"""Stage 1 — experience construction, one epoch at a time (driver side).

Execute (group episodes on Ray) → Distill (one job per task) → Verify (one job per task)
→ route + write memory. Each step skips what is already on disk, so a run killed at
any point continues with ``edv run --resume`` without losing or doubling anything:
episodes resume by episode id, stage jobs by their marker files, memory items by their
deterministic ids (``MemoryBank.add`` is idempotent).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from edv_ray.edv import records as R
from edv_ray.edv.jobs import StageJob, Voter
from edv_ray.edv.plan import draw_roles, poison_candidates
from edv_ray.edv.stages import route
from edv_ray.envs.tau2.tasks import task_brief
from edv_ray.memory import MemoryBank, MemoryItem, retrieve
from edv_ray.memory.records import Vote
from edv_ray.results.parquet_io import read_rows, write_rows_atomic
from edv_ray.runtime.plan import finished_attempts, make_spec, pending_specs


def retrieval_for(ctx, bank: MemoryBank, domain: str, task, solver: str) -> dict[str, list[str]]:
    """Top-k experiences for (task, solver): shared first, then the solver's private bank;
    never an item distilled from this task (leave-one-task-out, default on)."""
    e = ctx.cfg.edv
    if e.retrieval_k == 0 or len(bank) == 0:
        return {"experiences": [], "retrieved_item_ids": [], "retrieved_banks": []}
    hits = retrieve(bank, task_brief(task), solver=solver, k=e.retrieval_k, tau=e.retrieval_tau,
                    exclude_task_ids=[task.id] if e.leave_one_task_out else (), domain=domain)
    return {"experiences": [h.item.render() for h in hits],
            "retrieved_item_ids": [h.item.item_id for h in hits],
            "retrieved_banks": [h.bank for h in hits]}


def _voter(ctx, agent: str, vtype: str, episode_ids: list[str]) -> Voter:
    a = ctx.cfg.agent(agent)
    return Voter(agent=agent, verifier_type=vtype, sampling=a.sampling,
                 endpoint=ctx.pool.agent_endpoint(ctx.cfg, agent, f"verify|{agent}"),
                 json_mode=ctx.cfg.models[a.model].json_mode, context_episode_ids=episode_ids)


def run_epoch(ctx, bank: MemoryBank, epoch: int, train: dict[str, list]) -> list[str]:
    """One construction epoch. Returns the tasks left unfinished (their group had an
    infrastructure error, or a stage job failed): resume finishes them. A task is never
    distilled from an incomplete group."""
    cfg, e = ctx.cfg, ctx.cfg.edv
    roles = {(d, t.id): draw_roles(cfg, epoch, d, t.id) for d, ts in train.items() for t in ts}
    # ---- Execute --------------------------------------------------------------------
    specs, group_eids = [], defaultdict(list)
    for domain, tasks in train.items():
        for task in tasks:
            for agent in roles[(domain, task.id)].group:
                mem = (retrieval_for(ctx, bank, domain, task, agent)
                       if e.retrieve_during_construction else {})
                for trial in range(cfg.runtime.trials):
                    s = make_spec(cfg, ctx.run_id, ctx.pool, stage="execute", domain=domain,
                                  task=task, trial=trial, agent=agent, epoch=epoch, **mem)
                    specs.append(s)
                    group_eids[(domain, task.id)].append((agent, s.episode_id))
    ctx.runner.run(pending_specs(specs, ctx.run_dir), label=f"epoch {epoch} execute",
                   show_progress=ctx.show_progress)
    # ---- Distill (only tasks whose whole group finished) ------------------------------
    done = finished_attempts(ctx.run_dir, "execute")
    complete = {key for key, eids in group_eids.items()
                if all(done.get(x, (0, ""))[1] == "ok" for _, x in eids)}
    jobs = []
    for (domain, task_id), r in roles.items():
        name = R.task_file(task_id, domain)
        if ((domain, task_id) not in complete
                or R.edv_path(ctx.run_dir, "distill_runs", epoch, name).exists()):
            continue
        a = cfg.agent(r.distiller)
        jobs.append(StageJob(
            kind="distill", run_id=ctx.run_id, run_dir=str(ctx.run_dir), epoch=epoch,
            domain=domain, task_id=task_id, episode_ids=[x for _, x in group_eids[(domain, task_id)]],
            timeout_s=cfg.runtime.episode_timeout_s, distiller=r.distiller,
            distiller_type=r.distiller_type, sampling=a.sampling,
            endpoint=ctx.pool.agent_endpoint(cfg, r.distiller, f"distill|{r.distiller}"),
            json_mode=cfg.models[a.model].json_mode, sees_reward=e.distiller_sees_reward,
            require_contrast=e.require_contrast, max_candidates=e.max_candidates,
            retries=e.distill_retries, max_chars=e.max_trajectory_chars))
    ctx.runner.run_jobs(jobs, label=f"epoch {epoch} distill", show_progress=ctx.show_progress)
    # ---- Verify ---------------------------------------------------------------------
    jobs = []
    for (domain, task_id), r in roles.items():
        name = R.task_file(task_id, domain)
        marker = read_rows(R.edv_path(ctx.run_dir, "distill_runs", epoch, name))
        if not marker or R.edv_path(ctx.run_dir, "verify_runs", epoch, name).exists():
            continue
        poison = poison_candidates(cfg, epoch, domain, task_id)
        if marker[0]["n_candidates"] == 0 and not poison:
            continue
        eids = group_eids[(domain, task_id)]
        voters = [_voter(ctx, agent, vtype, [x for a, x in eids if a == agent]
                         if vtype == "executor" else [x for _, x in eids])
                  for agent, vtype in r.verifiers]
        jobs.append(StageJob(
            kind="verify", run_id=ctx.run_id, run_dir=str(ctx.run_dir), epoch=epoch,
            domain=domain, task_id=task_id, episode_ids=[x for _, x in eids],
            timeout_s=cfg.runtime.episode_timeout_s, voters=voters, poison=poison,
            retries=e.verify_retries, max_chars=e.max_trajectory_chars))
    ctx.runner.run_jobs(jobs, label=f"epoch {epoch} verify", show_progress=ctx.show_progress)
    update_memory(ctx, bank, epoch, roles)
    return [f"{d}/{t}" for (d, t) in sorted(roles) if not _task_finished(ctx, epoch, d, t)]


def _task_finished(ctx, epoch: int, domain: str, task_id: str) -> bool:
    name = R.task_file(task_id, domain)
    marker = read_rows(R.edv_path(ctx.run_dir, "distill_runs", epoch, name))
    if not marker:
        return False
    needs_votes = marker[0]["n_candidates"] > 0 or poison_candidates(ctx.cfg, epoch, domain, task_id)
    return not needs_votes or R.edv_path(ctx.run_dir, "verify_runs", epoch, name).exists()


def update_memory(ctx, bank: MemoryBank, epoch: int, roles: dict) -> list[dict[str, Any]]:
    """Route every verified candidate and write the banks (idempotent), then the decisions."""
    cfg = ctx.cfg
    decisions, items = [], []
    for (domain, task_id), r in sorted(roles.items()):
        name = R.task_file(task_id, domain)
        if not R.edv_path(ctx.run_dir, "verify_runs", epoch, name).exists():
            continue  # not verified yet (a failed job): resume will finish it
        cands = read_rows(R.edv_path(ctx.run_dir, "candidates", epoch, name))
        cands += poison_candidates(cfg, epoch, domain, task_id)
        votes = defaultdict(list)
        for v in read_rows(R.edv_path(ctx.run_dir, "votes", epoch, name)):
            votes[v["candidate_id"]].append(v)
        for c in cands:
            cv = votes.get(c["candidate_id"], [])
            dest, approvers = route({v["verifier"]: bool(v["approve"]) for v in cv})
            new = []
            if dest != "discard" and (not c["is_poison"] or cfg.edv.poison_to_memory):
                owners = [None] if dest == "shared" else approvers
                for owner in owners:
                    new.append(MemoryItem(
                        bank=dest, owner=owner, title=c["title"], when_to_use=c["when_to_use"],
                        rule=c["rule"], tags=c["tags"] or [], domain=domain,
                        source_task_ids=[task_id], epoch=epoch,
                        supporting_trajectory_ids=c["supporting_episode_ids"] or [],
                        rejected_trajectory_ids=c["rejected_episode_ids"] or [],
                        distiller=c["distiller"], method=cfg.method,
                        votes=[Vote(verifier=v["verifier"], approve=bool(v["approve"]),
                                    rationale=v["rationale"] or "") for v in cv]))
            items += new
            decisions.append(dict(
                candidate_id=c["candidate_id"], run_id=ctx.run_id, domain=domain, task_id=task_id,
                route=dest, approvers=approvers, verifiers=[v["verifier"] for v in cv],
                is_poison=c["is_poison"], supporting_all_failed=c["supporting_all_failed"],
                item_ids=[i.item_id for i in new]))
    if items:
        bank.add(items)
        bank.save()
    write_rows_atomic(decisions, R.edv_path(ctx.run_dir, "decisions", epoch, "part.parquet"),
                      R.DECISION_SCHEMA)
    return decisions
