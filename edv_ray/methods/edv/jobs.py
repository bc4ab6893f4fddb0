"""Worker-side EDV jobs: read the group's trajectories, call a stage, write its tables.

Each job writes its outputs atomically and its marker (``distill_runs`` /
``verify_runs``) last; a job that fails (model server down after retries, a crash)
writes no marker, so ``--resume`` runs it again and nothing is doubled. The runtime
calls a job through its ``handler`` (``module:function``), never by importing EDV.

What the stages see: the task as the solving agent observed it (the ticket, or the
user's first message — stored with each episode), the domain's full policy, and the
runs' transcripts shortened to the model's context budget; outcomes only where the
config's ``*_sees_reward`` switch says so (recorded with every vote).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import ConfigDict, Field

from edv_ray.methods.edv import records as R
from edv_ray.methods.edv.config import AUDIT_STAGE, CONTRAST_MARGIN, NAME
from edv_ray.methods.edv.instance import Instance
from edv_ray.methods.edv.stages import distill, supporting_ids, vote
from edv_ray.llm.client import CallLedger, LLMClient
from edv_ray.methods.jobbase import JobBase
from edv_ray.methods.jobkit import (
    RoleBinding,
    budget,
    env_of,
    json_caller,
    load_episode,
    map_concurrently,
    stage_ctx,
    transcript,
    write_calls,
)
from edv_ray.results.parquet_io import write_rows_atomic

VOTE_THREADS = 8  # votes of one task run concurrently (the server batches or queues)


class Voter(RoleBinding):
    agent: str
    verifier_type: str
    context_episode_ids: list[str]  # its own run (executor) or the group's runs
    sees_reward: bool = True


class StageJob(JobBase, RoleBinding):
    model_config = ConfigDict(extra="forbid")

    kind: str  # distill | verify
    method: str = NAME  # the EDV instance: its tables' folder, its calls' stages
    episode_ids: list[str]  # the execution group's episodes
    # distill
    distiller: str | None = None
    distiller_type: str | None = None
    sees_reward: bool = True
    require_contrast: bool = True
    contrast: Literal["graded", "binary"] = "graded"
    contrast_margin: float = CONTRAST_MARGIN
    max_candidates: int = 3
    retries: int = 1
    # verify
    voters: list[Voter] = Field(default_factory=list)
    poison: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def job_id(self) -> str:
        who = "" if self.method == NAME else f"{self.method}:"
        return f"{who}{self.kind}:{self.epoch}:{self.domain}:{self.task_id}"

    @property
    def handler(self) -> str:
        return f"edv_ray.methods.edv.jobs:run_{self.kind}_job"

    @property
    def recorded(self) -> "StageJob":
        """The job as its calls are recorded: under its instance's stage (``distill`` for
        ``edv``, ``distill_edv_blind`` for ``edv_blind``)."""
        stage = Instance(self.method).stage(self.kind)
        return self if stage == self.kind else self.model_copy(update={"kind": stage})


def trajectories(job: StageJob, env) -> tuple[list[R.TrajectoryView], str]:
    """The group's finished runs (stable labels T1.. by agent) and the task text the
    solving agents observed."""
    rows = [load_episode(job.run_dir, "execute", eid) for eid in job.episode_ids]
    rows = [r for r in rows if r["status"] == "ok"]
    rows.sort(key=lambda r: (r["agent"], r["episode_id"]))
    views = [R.TrajectoryView(label=f"T{i}", episode_id=r["episode_id"], agent=r["agent"],
                              success=bool(r["success"]), reward=float(r["reward"]),
                              transcript=transcript(env, r), signature=action_signature(r))
             for i, r in enumerate(rows, 1)]
    observed = next((r["observed_text"] for r in rows if r.get("observed_text")), "")
    return views, observed


def action_signature(row: dict[str, Any]) -> str:
    """A reward-blind fingerprint of what a run did: its tool calls (name + arguments) in
    order, or — for a benchmark answered in text — its answers."""
    import hashlib
    import json

    msgs = json.loads(row.get("messages_json") or "[]")
    acts = [[tc.get("name"), tc.get("arguments")] for m in msgs if m.get("role") == "assistant"
            for tc in (m.get("tool_calls") or [])]
    if not acts:
        acts = [m.get("content") for m in msgs if m.get("role") == "assistant"]
    return hashlib.sha1(json.dumps(acts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def has_contrast(trajs: list[R.TrajectoryView], sees_reward: bool, contrast: str = "graded",
                 margin: float = CONTRAST_MARGIN) -> bool:
    """The contrast gate, decided by the framework before any prompt is sent. A distiller
    shown the grades: ``graded`` — the group's stored rewards lie at least ``margin``
    apart (max − min); ``binary`` — a success and a failure. A reward-blind distiller:
    runs that did different things (their action signatures differ) — gating it on
    grades would tell it that its group holds a better and a worse run."""
    if not sees_reward:
        return len({t.signature for t in trajs}) > 1
    if contrast == "binary":
        n_ok = sum(t.success for t in trajs)
        return 0 < n_ok < len(trajs)
    rewards = [t.reward for t in trajs]
    return bool(rewards) and max(rewards) - min(rewards) >= margin - 1e-9  # 0.6 − 0.5 ≥ 0.1


def run_distill_job(job_json: str, client: LLMClient) -> dict[str, Any]:
    job = StageJob.model_validate_json(job_json)
    env, bench = env_of(job.benchmark)
    trajs, observed = trajectories(job, env)
    n_ok = sum(t.success for t in trajs)
    marker = dict(run_id=job.run_id, domain=job.domain, task_id=job.task_id,
                  distiller=job.distiller, distiller_type=job.distiller_type,
                  group=[t.agent for t in trajs], group_successes=n_ok, attempts=0,
                  n_candidates=0, error=None, sees_reward=False)  # no prompt sent yet
    name = R.task_file(job.task_id, job.domain)
    cands: list[dict[str, Any]] = []
    if not trajs:
        marker["status"] = "no_trajectories"
    elif job.require_contrast and not has_contrast(trajs, job.sees_reward, job.contrast,
                                                   job.contrast_margin):
        marker["status"] = "no_contrast"
    else:
        ledger = CallLedger()
        call = json_caller(client, job, stage_ctx(job.recorded, "distiller", job.distiller), ledger)
        try:
            res = distill(observed, env.policy(bench, job.domain), trajs, call,
                          sees_reward=job.sees_reward, max_candidates=job.max_candidates,
                          retries=job.retries, task_noun=env.task_noun,
                          fit=budget(job, f"distiller {job.distiller} ({job.endpoint.model_name})"))
        finally:
            write_calls(job.recorded, ledger, R.task_file(job.task_id, job.domain))
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
                      error=res.error, sees_reward=res.shown_outcomes)
    write_rows_atomic(cands, R.edv_path(job.run_dir, "candidates", job.epoch, name, job.method),
                      R.CANDIDATE_SCHEMA)
    write_rows_atomic([marker], R.edv_path(job.run_dir, "distill_runs", job.epoch, name, job.method),
                      R.DISTILL_RUN_SCHEMA)
    return {"job_id": job.job_id, "status": marker["status"], "n": len(cands)}


def _one_vote(job: StageJob, env, bench, observed: str, trajs: dict, voter: Voter,
              c: dict[str, Any], client: LLMClient, ledger: CallLedger) -> dict[str, Any]:
    ctx_trajs = [trajs[e] for e in voter.context_episode_ids if e in trajs]
    if voter.verifier_type == "none":
        v = (True, True, "verification disabled (verify_by=none)", False)
    else:
        ctx = stage_ctx(job.recorded, "verifier", voter.agent)
        if c["is_poison"]:  # the admission audit is an instrument, not construction cost
            ctx = dataclasses.replace(ctx, stage=Instance(job.method).stage(AUDIT_STAGE))
        call = json_caller(client, voter, ctx, ledger)
        r = vote(observed, env.policy(bench, job.domain), ctx_trajs, c["title"],
                 c["when_to_use"], c["rule"], call, retries=job.retries,
                 sees_reward=voter.sees_reward,
                 fit=budget(voter, f"verifier {voter.agent} ({voter.endpoint.model_name})"))
        v = (r.approve, r.parse_ok, r.rationale, r.shown_outcomes)
    return dict(
        candidate_id=c["candidate_id"], run_id=job.run_id, domain=job.domain,
        task_id=job.task_id, verifier=voter.agent, verifier_type=voter.verifier_type,
        approve=v[0], parse_ok=v[1], rationale=v[2][:2000], sees_reward=v[3],
        context_episode_ids=[t.episode_id for t in ctx_trajs],
        context_success=any(t.success for t in ctx_trajs) if ctx_trajs else None,
        supporting_all_failed=c["supporting_all_failed"], is_poison=c["is_poison"])


def run_verify_job(job_json: str, client: LLMClient) -> dict[str, Any]:
    """Every (voter, candidate) vote, concurrently; one marker when all are stored."""
    job = StageJob.model_validate_json(job_json)
    env, bench = env_of(job.benchmark)
    name = R.task_file(job.task_id, job.domain)
    cands = R.task_rows(job.run_dir, "candidates", job.epoch, name, job.method) + job.poison
    views, observed = trajectories(job, env)
    trajs = {t.episode_id: t for t in views}
    ledger = CallLedger()
    pairs = [(voter, c) for voter in job.voters for c in cands]
    try:
        votes = map_concurrently(lambda p: _one_vote(job, env, bench, observed, trajs, p[0],
                                                     p[1], client, ledger), pairs, VOTE_THREADS)
    finally:
        write_calls(job.recorded, ledger, R.task_file(job.task_id, job.domain))
    write_rows_atomic(votes, R.edv_path(job.run_dir, "votes", job.epoch, name, job.method),
                      R.VOTE_SCHEMA)
    write_rows_atomic([dict(run_id=job.run_id, domain=job.domain, task_id=job.task_id,
                            verifiers=[v.agent for v in job.voters], n_candidates=len(cands),
                            n_votes=len(votes), status="ok")],
                      R.edv_path(job.run_dir, "verify_runs", job.epoch, name, job.method),
                      R.VERIFY_RUN_SCHEMA)
    return {"job_id": job.job_id, "status": "ok", "n": len(votes)}
