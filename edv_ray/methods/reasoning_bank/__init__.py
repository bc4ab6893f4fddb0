"""ReasoningBank (arXiv 2509.25140), faithful to its paper, on edv-ray's harness.

For each pool agent (model), in task order: retrieve (the agent's own bank; the k = 1
most similar past *task query* → all its items) → act → the same model judges its run
WITHOUT the reward → extracts ≤ 3 items (title / one-sentence description / content):
strategies from a judged success, lessons from a judged failure → plain append. The
judge's label is stored beside the true reward (``rb_judge_audit``: P(judge = success |
reward = 0), the self-confirmation trap for RB).

Settings: the EDV comparison (default) builds the banks over the training tasks in
``epochs``, then every agent runs the test tasks with retrieval and no learning (stage
``rb_infer``); ``stream_on_test`` is RB's own setting (the test tasks are the stream;
stage ``rb_stream``). MaTTS ``parallel``: k rollouts per task, one self-contrast
extraction over them (≤ 5 items) and, for the reported score, the model's own
best-of-k pick. Sequential MaTTS (re-examining within an episode) is not implemented:
the config rejects it with a clear message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edv_ray.methods.registry import CONSTRUCTION, INFERENCE, Method, register

NAME = "reasoning_bank"
EXECUTE, STREAM, INFER, LEARN = "rb_execute", "rb_stream", "rb_infer", "rb_learn"


class ReasoningBankConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(1, ge=1, le=50)
    retrieval_k: int = Field(1, ge=0, le=20)  # past tasks whose items are injected
    max_items: int = Field(3, ge=1, le=10)
    retries: int = Field(2, ge=0, le=5)
    extract_temperature: float = Field(1.0, ge=0.0, le=2.0)
    leave_one_task_out: bool = True
    stream_on_test: bool = False
    matts: Literal["none", "parallel", "sequential"] = "none"
    matts_k: int = Field(3, ge=2, le=10)

    @model_validator(mode="after")
    def _check(self) -> "ReasoningBankConfig":
        if self.matts == "sequential":
            raise ValueError("matts=sequential (re-examining inside an episode) is not "
                             "implemented; use matts: parallel or none")
        if self.matts == "parallel" and self.max_items == 3:
            self.max_items = 5  # the paper's self-contrast extracts up to 5 items
        return self


def _bank_dir(ctx, agent: str) -> Path:
    """The agent's own bank; with memory_from, the source run's banks (all its agents)."""
    if ctx.cfg.memory_from:
        return ctx.run_dir / "rb" / "bank_from"
    return ctx.run_dir / "rb" / "bank" / f"agent={agent}"


def _memory(ctx, rb: ReasoningBankConfig):
    from edv_ray.runtime.spec import MemoryRequest

    def fn(domain, task, agent):
        if rb.retrieval_k == 0:
            return None
        return MemoryRequest(
            provider="edv_ray.methods.reasoning_bank.store:rb_experiences",
            params=dict(bank_dir=str(_bank_dir(ctx, agent)),
                        k=rb.retrieval_k,
                        exclude_task_ids=[task.id] if rb.leave_one_task_out else []))
    return fn


def _stream(ctx, rb: ReasoningBankConfig, tasks: dict[str, list], stage: str, epoch: int) -> None:
    """Each task in order: every agent acts (k rollouts with MaTTS), then learns from it."""
    from edv_ray.methods import steps
    from edv_ray.methods.jobkit import role_binding
    from edv_ray.methods.reasoning_bank.learn import RBLearnJob
    from edv_ray.methods.reasoning_bank.store import entry_path

    cfg, agents = ctx.cfg, ctx.cfg.executor_names()
    k = rb.matts_k if rb.matts == "parallel" else cfg.runtime.trials
    ordered = [(d, t) for d, ts in tasks.items() for t in ts]
    for i, (domain, task) in enumerate(ordered, 1):
        eids = steps.execute(ctx, stage=stage, method=NAME, epoch=epoch,
                             plan={(domain, task.id): agents}, tasks={domain: [task]},
                             memory=_memory(ctx, rb), trials=k,
                             label=f"rb e{epoch} {stage} {i}/{len(ordered)}")
        jobs = []
        for agent in agents:
            if entry_path(ctx.run_dir, agent, epoch, domain, task.id, stage).exists():
                continue
            jobs.append(RBLearnJob(
                run_id=ctx.run_id, run_dir=str(ctx.run_dir), epoch=epoch,
                benchmark=cfg.benchmark.model_dump(mode="json"), domain=domain,
                task_id=task.id, stage=stage, agent=agent,
                binding=role_binding(ctx, agent, LEARN),
                episode_ids=[e for a, e in eids[(domain, task.id)] if a == agent],
                max_items=rb.max_items, retries=rb.retries,
                extract_temperature=rb.extract_temperature, contrast=rb.matts == "parallel",
                timeout_s=cfg.runtime.episode_timeout_s))
        results = steps.run_jobs(ctx, jobs, f"rb learn {i}/{len(ordered)}")
        bad = [r["job_id"] for r in results if r.get("status") != "ok"]
        if bad:
            ctx.unfinished.extend(bad)


def contaminate(ctx, share: float) -> None:
    """Per agent bank: poison entries (a real entry's task query, a poison rule as the item)
    until they are ``share`` of the entries — coherent with past tasks, wrong in content."""
    from edv_ray.methods import contamination as C
    from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA, load_entries
    from edv_ray.results.parquet_io import write_rows_atomic

    rows = []
    for agent in ctx.cfg.executor_names():
        bank = _bank_dir(ctx, agent)
        clean = [e for e in load_entries(bank) if e["status"] != "contamination"]
        pool = [(d, p) for d in ctx.cfg.benchmark.domains for p in C.load_poison(d)]
        n = C.n_to_inject(len(clean), share, len(pool))
        for i, ((domain, p), host) in enumerate(zip(pool[:n], clean)):
            eid = f"rb-contamination-{agent}-{i}"
            write_rows_atomic([dict(
                entry_id=eid, run_id=ctx.run_id, agent=agent, domain=domain,
                task_id=f"contamination-{i}", stage="contamination", query=host["query"],
                query_embedding=host["query_embedding"], episode_ids=[], judge_labels=[],
                true_success=[], items=[{"title": p["title"], "description": p["when_to_use"],
                                         "content": p["rule"]}],
                status="contamination", error=None, picked_episode_id=None)],
                (bank / f"agent={agent}" if ctx.cfg.memory_from else bank) / "epoch=0"
                / f"{eid}.parquet", ENTRY_SCHEMA)  # the same depth as real entries
            rows.append(dict(run_id=ctx.run_id, bank="rb", owner=agent, domain=domain,
                             item_id=f"{eid}:0", rule=p["rule"], share_asked=share,
                             share_reached=n / (len(clean) + n)))
    C.record(ctx.run_dir, NAME, rows)
    ctx.console.print(f"contamination: {len(rows)} poison entr(ies) across the RB banks")


def run(ctx, rb: ReasoningBankConfig) -> None:
    from edv_ray.methods import contamination as C
    from edv_ray.methods import steps

    if rb.stream_on_test:
        _stream(ctx, rb, steps.test_tasks(ctx), STREAM, 0)
        return
    train, test = steps.train_tasks(ctx), steps.test_tasks(ctx)
    if ctx.cfg.memory_from:
        C.copy_source(ctx.cfg.memory_from, "rb/bank", ctx.run_dir / "rb" / "bank_from")
    for epoch in range(0 if ctx.cfg.memory_from else rb.epochs):
        _stream(ctx, rb, train, EXECUTE, epoch)
    if ctx.unfinished:
        ctx.console.print(f"[yellow]reasoning_bank: {len(ctx.unfinished)} step(s) unfinished; "
                          f"resume with `edv run --resume {ctx.run_dir}`[/]")
        return
    if ctx.cfg.contamination > 0:
        contaminate(ctx, ctx.cfg.contamination)
    plan = {(d, t.id): ctx.cfg.executor_names() for d, ts in test.items() for t in ts}
    steps.execute(ctx, stage=INFER, method=NAME, epoch=rb.epochs - 1, plan=plan, tasks=test,
                  memory=_memory(ctx, rb))


def add_views(con, run_dir) -> None:
    from pathlib import Path

    from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA, JUDGMENT_SCHEMA
    from edv_ray.results.views import register_table

    base = Path(run_dir) / "rb"
    register_table(con, "rb_entries", base / "bank", ENTRY_SCHEMA, ["agent", "epoch"])
    register_table(con, "rb_judgments", base / "judgments", JUDGMENT_SCHEMA, ["agent", "epoch"])
    con.execute("""
        CREATE OR REPLACE VIEW rb_judge_audit AS
        SELECT agent, stage, count(*) AS judged,
               count(*) FILTER (WHERE NOT parse_ok) AS unparseable,
               avg(CAST(label = 'success' AS DOUBLE)) FILTER (WHERE parse_ok) AS p_judge_success,
               avg(CAST(label = 'success' AS DOUBLE)) FILTER (WHERE parse_ok AND NOT true_success)
                   AS p_judge_success_given_failed,
               avg(CAST((label = 'success') = true_success AS DOUBLE)) FILTER (WHERE parse_ok)
                   AS judge_accuracy
        FROM rb_judgments GROUP BY ALL ORDER BY agent, stage
    """)


_RESULTS = f"""
SELECT run_id, '{NAME}' AS method, agent, epoch, domain, task_id, trial, status, success,
       reward, episode_id
FROM episodes WHERE stage = '{INFER}'
   OR (stage = '{STREAM}' AND NOT EXISTS (
         SELECT 1 FROM rb_entries r WHERE r.stage = '{STREAM}' AND r.picked_episode_id IS NOT NULL))
UNION ALL BY NAME
SELECT e.run_id, '{NAME}' AS method, e.agent, e.epoch, e.domain, e.task_id, 0 AS trial,
       e.status, e.success, e.reward, e.episode_id
FROM episodes e JOIN rb_entries r ON r.picked_episode_id = e.episode_id
WHERE e.stage = '{STREAM}'
"""

register(Method(
    name=NAME, config_cls=ReasoningBankConfig, run=run, add_views=add_views,
    results_sql=_RESULTS, has_memory=True, memory_dir="rb/bank",
    admitted_sql=f"""SELECT '{NAME}' AS method, 'rb' AS bank, sum(len(items))::BIGINT AS items
                     FROM rb_entries WHERE status IS DISTINCT FROM 'contamination'
                     HAVING count(*) > 0""",
    phases={EXECUTE: CONSTRUCTION, LEARN: CONSTRUCTION, INFER: INFERENCE, STREAM: INFERENCE},
    summary="per-model self-judged memory (ReasoningBank)"))
