"""Stage 1 — experience construction, one epoch at a time (driver side).

Execute (group episodes on Ray) → Distill (one job per task) → Verify (one job per task)
→ admit + write memory. Each step skips what is already on disk, so a run killed at
any point continues with ``edv run --resume`` without losing or doubling anything:
episodes resume by episode id, stage jobs by their marker files, memory items by their
deterministic ids (``MemoryBank.add`` is idempotent).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from edv_ray.methods.edv import records as R
from edv_ray.methods.edv.config import EDVConfig
from edv_ray.methods.edv.instance import EDV, Instance
from edv_ray.methods.edv.jobs import StageJob, Voter
from edv_ray.methods.edv.plan import draw_roles, poison_candidates
from edv_ray.methods.edv.retrieval import construction_memory
from edv_ray.methods.edv.stages import admit
from edv_ray.memory import MemoryBank, MemoryItem
from edv_ray.memory.records import Vote
from edv_ray.methods import steps
from edv_ray.methods.jobkit import role_binding
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.runtime.plan import finished_attempts


def _voter(ctx, agent: str, vtype: str, episode_ids: list[str], sees_reward: bool) -> Voter:
    return Voter(agent=agent, verifier_type=vtype, context_episode_ids=episode_ids,
                 sees_reward=sees_reward, **role_binding(ctx, agent, "verify"))


def run_epoch(ctx, e: EDVConfig, bank: MemoryBank, epoch: int, train: dict[str, list],
              inst: Instance = EDV) -> list[str]:
    """One construction epoch of EDV instance ``inst``. Returns the tasks left unfinished
    (their group had an infrastructure error, or a stage job failed): resume finishes
    them. A task is never distilled from an incomplete group."""
    cfg, me = ctx.cfg, inst.name
    roles = {(d, t.id): draw_roles(cfg, e, epoch, d, t.id) for d, ts in train.items() for t in ts}
    # ---- Execute --------------------------------------------------------------------
    group_eids = steps.execute(
        ctx, stage="execute", method=me, epoch=epoch, tasks=train,
        plan={key: r.group for key, r in roles.items()},
        memory=construction_memory(ctx, e, epoch, inst),
        trials=cfg.runtime.construction_rollouts, label=f"{me} epoch {epoch} execute")
    # ---- Distill (only tasks whose whole group finished) ------------------------------
    done = finished_attempts(ctx.run_dir, "execute")
    complete = {key for key, eids in group_eids.items()
                if all(done.get(x, (0, ""))[1] == "ok" for _, x in eids)}
    common = dict(run_id=ctx.run_id, run_dir=str(ctx.run_dir), epoch=epoch,
                  benchmark=cfg.benchmark.model_dump(mode="json"),
                  timeout_s=cfg.runtime.episode_timeout_s, method=me)
    jobs = []
    distilled = R.table_rows(ctx.run_dir, "distill_runs", epoch, me)  # markers (resume)
    for (domain, task_id), r in roles.items():
        if (domain, task_id) not in complete or R.task_file(task_id, domain) in distilled:
            continue
        jobs.append(StageJob(
            kind="distill", domain=domain, task_id=task_id,
            episode_ids=[x for _, x in group_eids[(domain, task_id)]],
            distiller=r.distiller, distiller_type=r.distiller_type,
            sees_reward=e.distiller_sees_reward, require_contrast=e.require_contrast,
            contrast=e.contrast, contrast_margin=e.contrast_margin,
            max_candidates=e.max_candidates, retries=e.distill_retries,
            **role_binding(ctx, r.distiller, "distill"), **common))
    steps.run_jobs(ctx, jobs, f"{me} epoch {epoch} distill")
    # ---- Verify ---------------------------------------------------------------------
    # each per-task table read once as a whole, merged first once no stage job reads it
    distilled = R.table_rows(ctx.run_dir, "distill_runs", epoch, me, merge=True)
    verified = R.table_rows(ctx.run_dir, "verify_runs", epoch, me)
    jobs = []
    for (domain, task_id), r in roles.items():
        name = R.task_file(task_id, domain)
        marker = distilled.get(name)
        if not marker or name in verified:
            continue
        poison = poison_candidates(cfg, e, epoch, domain, task_id)
        if marker[0]["n_candidates"] == 0 and not poison:
            continue
        eids = group_eids[(domain, task_id)]
        voters = [_voter(ctx, agent, vtype, [x for a, x in eids if a == agent]
                         if vtype == "executor" else [x for _, x in eids], e.verifiers_see_reward)
                  for agent, vtype in r.verifiers]
        jobs.append(StageJob(
            kind="verify", domain=domain, task_id=task_id, episode_ids=[x for _, x in eids],
            voters=voters, poison=poison, retries=e.verify_retries, **common))
    steps.run_jobs(ctx, jobs, f"{me} epoch {epoch} verify")
    verified = R.table_rows(ctx.run_dir, "verify_runs", epoch, me, merge=True)
    update_memory(ctx, e, bank, epoch, roles, inst, verified)
    unfinished = [f"{d}/{t}" for (d, t) in sorted(roles)
                  if not _task_finished(ctx, e, epoch, d, t, distilled, verified)]
    R.compact_epoch(ctx.run_dir, epoch, me)  # a few files per table for the views, not one per task
    return unfinished


def _task_finished(ctx, e: EDVConfig, epoch: int, domain: str, task_id: str,
                   distilled: dict[str, list], verified: dict[str, list]) -> bool:
    name = R.task_file(task_id, domain)
    marker = distilled.get(name)
    if not marker:
        return False
    needs_votes = marker[0]["n_candidates"] > 0 or poison_candidates(ctx.cfg, e, epoch, domain, task_id)
    return not needs_votes or name in verified


def update_memory(ctx, e: EDVConfig, bank: MemoryBank, epoch: int, roles: dict,
                  inst: Instance = EDV, verified: dict[str, list] | None = None
                  ) -> list[dict[str, Any]]:
    """Admit every verified candidate to its bank(s) and write the banks (idempotent), then
    the decisions. ``verified``: the epoch's ``verify_runs`` markers, if read already."""
    decisions, items, me = [], [], inst.name
    if verified is None:
        verified = R.table_rows(ctx.run_dir, "verify_runs", epoch, me, merge=True)
    candidates = R.table_rows(ctx.run_dir, "candidates", epoch, me, merge=True)
    all_votes = R.table_rows(ctx.run_dir, "votes", epoch, me, merge=True)
    for (domain, task_id), r in sorted(roles.items()):
        name = R.task_file(task_id, domain)
        if name not in verified:
            continue  # not verified yet (a failed job): resume will finish it
        cands = candidates.get(name, []) + poison_candidates(ctx.cfg, e, epoch, domain, task_id)
        votes = defaultdict(list)
        for v in all_votes.get(name, []):
            votes[v["candidate_id"]].append(v)
        for c in cands:
            cv = votes.get(c["candidate_id"], [])
            dest, approvers = admit({v["verifier"]: bool(v["approve"]) for v in cv})
            new = []
            if dest != "discard" and (not c["is_poison"] or e.poison_to_memory):
                owners = [None] if dest == "shared" else approvers
                for owner in owners:
                    new.append(MemoryItem(
                        bank=dest, owner=owner, title=c["title"], when_to_use=c["when_to_use"],
                        rule=c["rule"], tags=c["tags"] or [], domain=domain,
                        source_task_ids=[task_id], epoch=epoch,
                        supporting_trajectory_ids=c["supporting_episode_ids"] or [],
                        rejected_trajectory_ids=c["rejected_episode_ids"] or [],
                        distiller=c["distiller"], method=me,
                        votes=[Vote(verifier=v["verifier"], approve=bool(v["approve"]),
                                    rationale=v["rationale"] or "") for v in cv]))
            items += new
            decisions.append(dict(
                candidate_id=c["candidate_id"], run_id=ctx.run_id, domain=domain, task_id=task_id,
                route=dest, approvers=approvers, verifiers=[v["verifier"] for v in cv],
                is_poison=c["is_poison"], supporting_all_failed=c["supporting_all_failed"],
                item_ids=[i.item_id for i in new]))
    if items:
        bank.add(steps.embed_on_workers(ctx, items, f"{me} epoch {epoch} embed",
                                        e.item_embedding_precision))
        bank.save()
    write_rows_atomic(decisions, R.edv_path(ctx.run_dir, "decisions", epoch, "part.parquet", me),
                      R.DECISION_SCHEMA)
    return decisions
