"""Judge (the paper's ensemble baseline): every pool model runs each test task (the
No-Memory runs, stage ``eval`` — shared when both methods are in one run), then an
LLM-as-judge (``roles.judge``) picks one of the heterogeneous outcomes WITHOUT seeing
any reward; the picked run's reward is the method's. No memory.

Every candidate run and the pick are stored (``judge_picks/``), so the report shows the
judge's accuracy (picked a passing run when one existed) beside the oracle best-of-n.
A judge answer that stays malformed after retries picks nothing: the task counts as a
failure (parse_ok = false), never as a silent default pick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from edv_ray.methods.jobbase import JobBase
from edv_ray.methods.sections import JudgeConfig, check_judge as check
from edv_ray.methods.registry import INFERENCE, PICK, Method, register

NAME = "judge"
KIND = "judge"
_S, _L = pa.string(), pa.list_(pa.string())
PICK_SCHEMA = pa.schema([
    ("run_id", _S), ("domain", _S), ("task_id", _S), ("trial", pa.int32()), ("judge", _S),
    ("status", _S), ("parse_ok", pa.bool_()), ("attempts", pa.int32()), ("rationale", _S),
    ("candidate_episode_ids", _L), ("candidate_agents", _L),
    ("candidate_success", pa.list_(pa.bool_())), ("any_success", pa.bool_()),
    ("picked_label", _S), ("picked_episode_id", _S), ("picked_agent", _S),
    ("picked_success", pa.bool_()), ("picked_reward", pa.float64()), ("error", _S),
])


class JudgeAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pick: str = Field(min_length=1, max_length=16)
    rationale: str = Field(default="", max_length=2000)


class JudgeJob(JobBase):
    kind: str = KIND
    trial: int
    judge: str
    binding: dict[str, Any]
    episode_ids: list[str]  # the pool's runs of this task and trial
    retries: int = 2

    @property
    def job_id(self) -> str:
        return f"{KIND}:{self.domain}:{self.task_id}:{self.trial}"

    @property
    def handler(self) -> str:
        return "edv_ray.methods.judge:run_judge_job"


def pick_path(run_dir, domain: str, task_id: str, trial: int) -> Path:
    from edv_ray.results.store import task_file

    name = task_file(task_id, domain).replace(".parquet", f".t{trial}.parquet")
    return Path(run_dir) / "judge_picks" / "epoch=0" / name


def run(ctx, section: JudgeConfig) -> None:
    from edv_ray.methods import steps
    from edv_ray.methods.jobkit import role_binding
    from edv_ray.methods.no_memory import STAGE, run_pool_on_tests
    from edv_ray.runtime.spec import episode_id

    cfg = ctx.cfg
    _test, eids = run_pool_on_tests(ctx, NAME)
    binding = role_binding(ctx, cfg.roles.judge, KIND,
                           cfg.agent(cfg.roles.judge).sampling.model_copy(update={"temperature": 0.0}))
    jobs = []
    for (domain, task_id) in eids:
        for trial in range(cfg.runtime.trials):
            if _picked(ctx.run_dir, domain, task_id, trial):
                continue
            ids = [episode_id(STAGE, 0, domain, task_id, trial, a) for a in cfg.executor_names()]
            jobs.append(JudgeJob(run_id=ctx.run_id, run_dir=str(ctx.run_dir),
                                 benchmark=cfg.benchmark.model_dump(mode="json"), domain=domain,
                                 task_id=task_id, trial=trial, judge=cfg.roles.judge,
                                 binding=binding,
                                 episode_ids=ids, retries=section.retries,
                                 timeout_s=cfg.runtime.episode_timeout_s))
    results = steps.run_jobs(ctx, jobs, "judge picks")
    by_id = {j.job_id: j for j in jobs}
    for r in results:
        if r.get("status") == "ok":
            continue
        job = by_id[r["job_id"]]
        if not _picked(ctx.run_dir, job.domain, job.task_id, job.trial, any_status=True):
            _error_pick(job, r.get("error") or "judge job failed")  # it crashed: no row yet
        ctx.unfinished.append(r["job_id"])


def _picked(run_dir, domain: str, task_id: str, trial: int, any_status: bool = False) -> bool:
    """A pick is final when it is stored and not an infrastructure error (an error pick
    — a failed judge call, or no candidate run finished — is redone on resume)."""
    from edv_ray.results.parquet_io import read_rows

    rows = read_rows(pick_path(run_dir, domain, task_id, trial))
    return bool(rows) and (any_status or rows[0]["status"] == "ok")


def _error_pick(job: "JudgeJob", error: str) -> None:
    """The task stays in Judge's denominator as an error (a failure) until resumed."""
    from edv_ray.results.parquet_io import write_rows_atomic

    row = {k: None for k in PICK_SCHEMA.names}
    row.update(run_id=job.run_id, domain=job.domain, task_id=job.task_id, trial=job.trial,
               judge=job.judge, status="error", parse_ok=False, attempts=0,
               candidate_episode_ids=job.episode_ids, error=error[:2000])
    write_rows_atomic([row], pick_path(job.run_dir, job.domain, job.task_id, job.trial), PICK_SCHEMA)


def run_judge_job(job_json: str, client) -> dict[str, Any]:
    """Worker side: show the judge every finished run (no rewards) and store its pick."""
    from edv_ray.prompts import fence
    from edv_ray.llm.client import CallLedger
    from edv_ray.methods.answers import ask_json
    from edv_ray.methods.jobkit import (RoleBinding, budget, env_of, json_caller, load_episode,
                                        stage_ctx, transcript, write_calls)
    from edv_ray.prompts import render_prompt
    from edv_ray.results.parquet_io import write_rows_atomic

    job = JudgeJob.model_validate_json(job_json)
    env, bench = env_of(job.benchmark)
    rows = sorted((load_episode(job.run_dir, "eval", e) for e in job.episode_ids),
                  key=lambda r: (r["agent"], r["episode_id"]))
    ok = [r for r in rows if r["status"] == "ok"]
    if len(ok) < len(rows):  # judge only the whole pool: resume re-runs the missing runs
        ok = []
    labels = {f"T{i}": r for i, r in enumerate(ok, 1)}
    out = dict(run_id=job.run_id, domain=job.domain, task_id=job.task_id, trial=job.trial,
               judge=job.judge, candidate_episode_ids=[r["episode_id"] for r in ok],
               candidate_agents=[r["agent"] for r in ok],
               candidate_success=[bool(r["success"]) for r in ok],
               any_success=any(r["success"] for r in ok), parse_ok=False, attempts=0)
    if not ok:  # a candidate run errored: an infrastructure error, counted as one
        out.update(status="error", error=f"{len(rows) - sum(r['status'] == 'ok' for r in rows)} "
                                         f"of {len(rows)} candidate run(s) errored")
    else:
        binding = RoleBinding.model_validate(job.binding)
        observed = next((r["observed_text"] for r in ok if r.get("observed_text")), "")

        def render(parts: list[str]) -> str:
            runs = "\n".join(f'<run label="{lab}">\n{fence(tx)}\n</run>'
                             for lab, tx in zip(labels, parts))
            return render_prompt("methods", "judge_pick.v1", task_noun=env.task_noun,
                                 task=fence(observed), policy=env.policy(bench, job.domain), runs=runs)

        prompt = budget(binding, f"judge {job.judge} ({binding.endpoint.model_name})")(
            render, [transcript(env, r) for r in ok])
        ledger = CallLedger()

        def known(a: JudgeAnswer) -> None:
            if a.pick.strip() not in labels:
                raise ValueError(f"pick {a.pick!r} is not one of {sorted(labels)}")
        try:
            ans, attempts, err = ask_json(json_caller(client, binding, stage_ctx(job, "judge", job.judge, job.trial),
                                                      ledger), prompt, JudgeAnswer, job.retries, known)
        finally:
            write_calls(job, ledger, pick_path(job.run_dir, job.domain, job.task_id, job.trial).name)
        out.update(status="ok", attempts=attempts, error=err)
        if ans is not None:
            r = labels[ans.pick.strip()]
            out.update(parse_ok=True, rationale=ans.rationale, picked_label=ans.pick.strip(),
                       picked_episode_id=r["episode_id"], picked_agent=r["agent"],
                       picked_success=bool(r["success"]), picked_reward=float(r["reward"]))
        else:
            out.update(picked_success=False, picked_reward=0.0)
    write_rows_atomic([out], pick_path(job.run_dir, job.domain, job.task_id, job.trial), PICK_SCHEMA)
    return {"job_id": job.job_id, "status": out["status"], "error": out.get("error")}


def add_views(con, run_dir) -> None:
    from edv_ray.results.views import register_table

    register_table(con, "judge_picks", Path(run_dir) / "judge_picks", PICK_SCHEMA, ["epoch"])
    con.execute("""
        CREATE OR REPLACE VIEW judge_accuracy AS
        SELECT domain, count(*) AS tasks, count(*) FILTER (WHERE status = 'error') AS errors,
               count(*) FILTER (WHERE NOT parse_ok AND status = 'ok') AS unparseable,
               avg(CAST(coalesce(picked_success, false) AS DOUBLE)) AS judge_pass_at_1,
               avg(CAST(coalesce(any_success, false) AS DOUBLE)) AS oracle_best_of_n,
               avg(CAST(picked_success AS DOUBLE)) FILTER (WHERE any_success) AS picked_a_pass_when_one_existed
        FROM judge_picks GROUP BY ALL ORDER BY domain
    """)


register(Method(
    name=NAME, config_cls=JudgeConfig, run=run, check=check, add_views=add_views,
    uses_train=False,
    results_sql=f"""SELECT run_id, '{NAME}' AS method, picked_agent AS agent, epoch, domain,
                           task_id, trial, status,
                           CASE WHEN status = 'ok' THEN coalesce(picked_success, false) END AS success,
                           picked_reward AS reward, picked_episode_id AS episode_id
                    FROM judge_picks""",
    phases={"eval": INFERENCE, KIND: INFERENCE},
    scoring=PICK, report_order=20, judging_roles=("judge",),
    report_tables=(("judge_accuracy", "Judge: pick accuracy vs oracle best-of-n",
                    "SELECT * FROM judge_accuracy", ""),),
    summary="every pool model runs; an LLM judge picks one outcome (no rewards)"))
