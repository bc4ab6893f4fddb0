"""Worker-side EDV jobs: read the group's trajectories, call a stage, write its tables.

Each job writes its outputs atomically and its marker (``distill_runs`` /
``verify_runs``) last; a job that fails (model server down after retries, a crash)
writes no marker, so ``--resume`` runs it again and nothing is doubled.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from edv_ray.config import Sampling
from edv_ray.edv import records as R
from edv_ray.edv.stages import distill, render_transcript, supporting_ids, vote
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.results.parquet_io import read_rows, write_rows_atomic
from edv_ray.results.schema import CALL_SCHEMA


class Voter(BaseModel):
    agent: str
    verifier_type: str
    endpoint: Endpoint
    sampling: Sampling
    json_mode: str
    context_episode_ids: list[str]  # its own run (executor) or the group's runs


class StageJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str  # distill | verify
    run_id: str
    run_dir: str
    epoch: int
    domain: str
    task_id: str
    episode_ids: list[str]  # the execution group's episodes
    timeout_s: float = 900.0
    # distill
    distiller: str | None = None
    distiller_type: str | None = None
    endpoint: Endpoint | None = None
    sampling: Sampling | None = None
    json_mode: str = "schema"
    sees_reward: bool = True
    require_contrast: bool = True
    max_candidates: int = 3
    retries: int = 1
    max_chars: int = 6000
    # verify
    voters: list[Voter] = Field(default_factory=list)
    poison: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def job_id(self) -> str:
        return f"{self.kind}:{self.epoch}:{self.domain}:{self.task_id}"


def load_episode(run_dir: str, stage: str, episode_id: str) -> dict[str, Any]:
    folder = Path(run_dir) / "episodes" / f"stage={stage}"
    files = sorted(folder.glob(f"{episode_id}.a*.parquet"),
                   key=lambda p: int(p.name.rsplit(".a", 1)[1].split(".")[0]))
    if not files:
        raise FileNotFoundError(f"episode {episode_id} has no file in {folder}")
    return read_rows(files[-1])[0]


def trajectories(job: StageJob) -> list[R.TrajectoryView]:
    rows = [load_episode(job.run_dir, "execute", eid) for eid in job.episode_ids]
    rows = [r for r in rows if r["status"] == "ok"]
    rows.sort(key=lambda r: (r["agent"], r["episode_id"]))
    return [R.TrajectoryView(label=f"T{i}", episode_id=r["episode_id"], agent=r["agent"],
                             success=bool(r["success"]), reward=float(r["reward"]),
                             transcript=render_transcript(json.loads(r["messages_json"] or "[]"),
                                                          job.max_chars))
            for i, r in enumerate(rows, 1)]


def _caller(client: LLMClient, endpoint: Endpoint, sampling: Sampling, json_mode: str,
            ctx: CallContext, ledger: CallLedger):
    def call(messages, schema):
        rf = None
        if json_mode == "schema":
            rf = {"type": "json_object", "schema": schema}
        elif json_mode == "json_object":
            rf = {"type": "json_object"}
        out = client.complete(endpoint, messages, ctx=ctx, ledger=ledger, sampling=sampling,
                              response_format=rf)
        return out.content or ""
    return call


def _ctx(job: StageJob, role: str, agent: str) -> CallContext:
    return CallContext(run_id=job.run_id, stage=job.kind, role=role, agent=agent,
                       domain=job.domain, task_id=job.task_id, epoch=job.epoch,
                       episode_id=f"{job.kind}-e{job.epoch}-{job.domain}-{job.task_id}")


def _write_calls(job: StageJob, ledger: CallLedger) -> None:
    rows = [{k: r.get(k) for k in CALL_SCHEMA.names} for r in ledger.rows()]
    name = R.task_file(job.task_id, job.domain).replace(".parquet", f".{uuid.uuid4().hex[:8]}.parquet")
    write_rows_atomic(rows, Path(job.run_dir) / "llm_calls" / f"stage={job.kind}" / name, CALL_SCHEMA)


def run_distill_job(job: StageJob, client: LLMClient) -> dict[str, Any]:
    from edv_ray.envs.tau2.tasks import domain_policy, task_brief, task_by_id

    trajs = trajectories(job)
    n_ok = sum(t.success for t in trajs)
    marker = dict(run_id=job.run_id, domain=job.domain, task_id=job.task_id,
                  distiller=job.distiller, distiller_type=job.distiller_type,
                  group=[t.agent for t in trajs], group_successes=n_ok, attempts=0,
                  n_candidates=0, error=None)
    name = R.task_file(job.task_id, job.domain)
    cands: list[dict[str, Any]] = []
    if not trajs:
        marker["status"] = "no_trajectories"
    elif job.require_contrast and not (0 < n_ok < len(trajs)):
        marker["status"] = "no_contrast"
    else:
        ledger = CallLedger()
        call = _caller(client, job.endpoint, job.sampling, job.json_mode,
                       _ctx(job, "distiller", job.distiller), ledger)
        try:
            res = distill(task_brief(task_by_id(job.domain, job.task_id)),
                          domain_policy(job.domain)[: job.max_chars], trajs, call,
                          sees_reward=job.sees_reward, max_candidates=job.max_candidates,
                          retries=job.retries)
        finally:
            _write_calls(job, ledger)
        by_id = {t.episode_id: t for t in trajs}
        for i, e in enumerate(res.experiences):
            sup, rej = supporting_ids(e.evidence, trajs)
            cands.append(dict(
                candidate_id=R.candidate_id(job.epoch, job.domain, job.task_id, i, e.rule),
                run_id=job.run_id, domain=job.domain, task_id=job.task_id,
                distiller=job.distiller, distiller_type=job.distiller_type, title=e.title,
                when_to_use=e.when_to_use, rule=e.rule, tags=e.tags,
                supporting_episode_ids=sup, rejected_episode_ids=rej,
                supporting_all_failed=not any(by_id[s].success for s in sup), is_poison=False))
        marker.update(status=res.status, attempts=res.attempts, n_candidates=len(cands),
                      error=res.error)
    write_rows_atomic(cands, R.edv_path(job.run_dir, "candidates", job.epoch, name), R.CANDIDATE_SCHEMA)
    write_rows_atomic([marker], R.edv_path(job.run_dir, "distill_runs", job.epoch, name),
                      R.DISTILL_RUN_SCHEMA)
    return {"job_id": job.job_id, "status": marker["status"], "n": len(cands)}


def run_verify_job(job: StageJob, client: LLMClient) -> dict[str, Any]:
    from edv_ray.envs.tau2.tasks import domain_policy, task_brief, task_by_id

    name = R.task_file(job.task_id, job.domain)
    cands = read_rows(R.edv_path(job.run_dir, "candidates", job.epoch, name)) + job.poison
    task = task_brief(task_by_id(job.domain, job.task_id))
    policy = domain_policy(job.domain)[: job.max_chars]
    trajs = {t.episode_id: t for t in trajectories(job)}
    votes: list[dict[str, Any]] = []
    ledger = CallLedger()
    try:
        for voter in job.voters:
            ctx_trajs = [trajs[e] for e in voter.context_episode_ids if e in trajs]
            context = "\n\n".join(
                f"Run by {t.agent} (outcome: {'success' if t.success else 'failure'}):\n{t.transcript}"
                for t in ctx_trajs) or "(no run of yours is available)"
            call = _caller(client, voter.endpoint, voter.sampling, voter.json_mode,
                           _ctx(job, "verifier", voter.agent), ledger)
            for c in cands:
                if voter.verifier_type == "none":
                    v = (True, True, "verification disabled (verify_by=none)")
                else:
                    r = vote(task, policy, context, c["title"], c["when_to_use"], c["rule"],
                             call, retries=job.retries)
                    v = (r.approve, r.parse_ok, r.rationale)
                votes.append(dict(
                    candidate_id=c["candidate_id"], run_id=job.run_id, domain=job.domain,
                    task_id=job.task_id, verifier=voter.agent, verifier_type=voter.verifier_type,
                    approve=v[0], parse_ok=v[1], rationale=v[2][:2000],
                    context_episode_ids=[t.episode_id for t in ctx_trajs],
                    context_success=any(t.success for t in ctx_trajs) if ctx_trajs else None,
                    supporting_all_failed=c["supporting_all_failed"], is_poison=c["is_poison"]))
    finally:
        _write_calls(job, ledger)
    write_rows_atomic(votes, R.edv_path(job.run_dir, "votes", job.epoch, name), R.VOTE_SCHEMA)
    write_rows_atomic([dict(run_id=job.run_id, domain=job.domain, task_id=job.task_id,
                            verifiers=[v.agent for v in job.voters], n_candidates=len(cands),
                            n_votes=len(votes), status="ok")],
                      R.edv_path(job.run_dir, "verify_runs", job.epoch, name), R.VERIFY_RUN_SCHEMA)
    return {"job_id": job.job_id, "status": "ok", "n": len(votes)}


JOBS = {"distill": run_distill_job, "verify": run_verify_job}
