"""Reusable steps that methods compose (driver side, over a ``RunContext``).

* :func:`train_tasks` / :func:`test_tasks` — the benchmark's selections;
* :func:`execute` — run (agent, task, trial) episodes of one stage, resumably;
* :func:`draw_group` — a seeded execution group per (epoch, task);
* :func:`select_solvers` — the Model Selector over the Ability Matrix, every decision
  stored (``routing/``) with the basis it used (task type, its domain, or the prior);
* :func:`solve` — run one chosen solver per test task (with or without memory);
* :func:`embed_on_workers` — memory items' embeddings computed on the run's workers.

Memory is passed as a function ``(domain, task, agent) -> MemoryRequest | None``; the
worker performs the retrieval when the agent has observed its task.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Callable

from rich.markup import escape

from edv_ray.methods import ability_matrix
from edv_ray.methods.selector import random_solver, select_solver
from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import ROUTING_SCHEMA
from edv_ray.runtime.plan import make_spec, pending_specs
from edv_ray.runtime.spec import MemoryRequest

MemoryFn = Callable[[str, object, str], "MemoryRequest | None"]
Key = tuple[str, str]  # (domain, task_id)


def train_tasks(ctx) -> dict[str, list]:
    b = ctx.cfg.benchmark
    return ctx.env.select_tasks(b, b.train_split, b.train_task_ids, b.num_train_tasks)


def test_tasks(ctx) -> dict[str, list]:
    b = ctx.cfg.benchmark
    return ctx.env.select_tasks(b, b.split, b.task_ids, b.num_tasks)


def task_rng(seed: int, epoch: int, domain: str, task_id: str, what: str) -> random.Random:
    return random.Random(f"{seed}|{epoch}|{domain}|{task_id}|{what}")


def draw_group(cfg, epoch: int, domain: str, task_id: str, n: int) -> list[str]:
    """The execution group of a task: ``n`` executors drawn with a seeded RNG, so EDV and
    Router (and a resumed run) draw the same group for the same (seed, epoch, task)."""
    execs = sorted(cfg.executor_names())
    return sorted(task_rng(cfg.seed, epoch, domain, task_id, "group").sample(execs, n))


def execute(ctx, *, stage: str, method: str, epoch: int, plan: dict[Key, list[str]],
            tasks: dict[str, list], memory: MemoryFn | None = None,
            trials: int | None = None, label: str | None = None,
            condition: str = "") -> dict[Key, list[tuple[str, str]]]:
    """Run every (agent in plan[task], trial) episode not already finished; returns
    (domain, task_id) → [(agent, episode_id)]."""
    cfg = ctx.cfg
    specs, eids = [], {}
    for domain, ts in tasks.items():
        for task in ts:
            for agent in plan.get((domain, task.id), []):
                mem = memory(domain, task, agent) if memory is not None else None
                for trial in range(trials or cfg.runtime.trials):
                    s = make_spec(cfg, ctx.run_id, ctx.pool, ctx.env, stage=stage, method=method,
                                  domain=domain, task=task, trial=trial, agent=agent,
                                  task_type=ctx.task_type(domain, task), epoch=epoch, memory=mem)
                    specs.append(s)
                    eids.setdefault((domain, task.id), []).append((agent, s.episode_id))
    record_uses(ctx, method, stage, epoch, specs, condition)
    todo = pending_specs(specs, ctx.run_dir)
    if len(todo) < len(specs):
        ctx.console.print(f"resume: {len(specs) - len(todo)} of {len(specs)} {stage} episodes done")
    ctx.runner.run(todo, label=label or f"{method} {stage} e{epoch}", show_progress=ctx.show_progress)
    ctx.tracker.episodes_done(ctx)
    return eids


def record_uses(ctx, method: str, stage: str, epoch: int, specs: list, condition: str = "") -> None:
    """``uses/method=M/<stage>-e<epoch>[-<condition>]-<hash of the task set>.parquet``:
    the episodes this call of ``method`` uses — run here or already run by another method
    (a shared episode is listed under each method that uses it, so results and token
    costs are the same whatever the order of ``method:``). One file per call (stage,
    epoch, condition, tasks): a resumed call whose episodes changed replaces it, so a task
    is never counted twice."""
    import hashlib

    from edv_ray.results.schema import USES_SCHEMA

    if not specs:
        return
    tasks = sorted({f"{s.domain}\x1f{s.task_id}" for s in specs})
    digest = hashlib.sha1("\n".join(tasks).encode()).hexdigest()[:12]
    rows = [dict(run_id=ctx.run_id, stage=stage, epoch=epoch, episode_id=s.episode_id,
                 memory_key=s.memory_key, condition=condition) for s in specs]
    tag = f"-{re.sub(r'[^A-Za-z0-9.]+', '_', condition)}" if condition else ""
    write_rows_atomic(rows, Path(ctx.run_dir) / "uses" / f"method={method}"
                      / f"{stage}-e{epoch}{tag}-{digest}.parquet", USES_SCHEMA)


def select_solvers(ctx, *, method: str, epoch: int, tasks: dict[str, list],
                   fixed: str | None = None, matrix_from: Path | None = None,
                   random_seed: int | None = None) -> dict[Key, str]:
    """The solver per test task (the Model Selector): best Ability-Matrix cell of its task
    type, counted over the construction executions ``method`` itself used in epochs up
    to ``epoch`` (:func:`ability_matrix.method_matrix`, stored in ``routing_matrix/``);
    an unseen task type falls back to its domain's row, then to the prior. Every
    decision is written to ``routing/method=M/epoch=E/part.parquet`` with its basis.
    ``matrix_from``: select with a stored matrix instead (``memory_from``: the source
    run's). ``fixed``: that solver for every task; ``random_seed``: an executor drawn
    per task (``random_solver``)."""
    base = Path(ctx.run_dir)
    decided = _stored_decisions(base, method, epoch, tasks)
    if decided is not None:  # resume: the decisions made the first time stand
        return decided
    cells = ability_matrix.method_matrix(base, ctx.run_id, method, epoch, matrix_from)
    cands = ctx.cfg.executor_names()
    out, rows = {}, []
    for domain, ts in tasks.items():
        for task in ts:
            tt = ctx.task_type(domain, task)
            if fixed:
                choice = (fixed, "fixed", None, 0)
            elif random_seed is not None:
                choice = (random_solver(cands, random_seed, domain, task.id), "random", None, 0)
            else:
                choice = select_solver(ability_matrix.row(cells, "task_type", tt),
                                       ability_matrix.row(cells, "domain", domain), cands)
            out[(domain, task.id)] = choice[0]
            rows.append(dict(run_id=ctx.run_id, method=method, epoch=epoch, domain=domain,
                             task_id=task.id, task_type=tt, solver=choice[0], basis=choice[1],
                             score=choice[2], attempts=choice[3]))
    write_rows_atomic(rows, base / "routing" / f"method={method}" / f"epoch={epoch}" / "part.parquet",
                      ROUTING_SCHEMA)
    return out


def _stored_decisions(base: Path, method: str, epoch: int, tasks: dict[str, list]
                      ) -> dict[Key, str] | None:
    """The decisions already written for this (method, epoch), when they cover the tasks."""
    from edv_ray.results.parquet_io import read_rows

    rows = read_rows(base / "routing" / f"method={method}" / f"epoch={epoch}" / "part.parquet")
    got = {(r["domain"], r["task_id"]): r["solver"] for r in rows}
    want = {(d, t.id) for d, ts in tasks.items() for t in ts}
    return {k: got[k] for k in want} if rows and want <= set(got) else None


def solve(ctx, *, stage: str, method: str, epoch: int, tasks: dict[str, list],
          solvers: dict[Key, str], memory: MemoryFn | None = None,
          condition: str = "") -> dict[Key, list[tuple[str, str]]]:
    """Each test task run by its chosen solver (trials as configured)."""
    plan = {key: [agent] for key, agent in solvers.items()}
    return execute(ctx, stage=stage, method=method, epoch=epoch, plan=plan, tasks=tasks,
                   memory=memory, condition=condition)


def run_jobs(ctx, jobs: list, label: str) -> list[dict]:
    """Run stage jobs; failures (no marker written: resume re-runs them) are shown."""
    results = ctx.runner.run_jobs(jobs, label=label, show_progress=ctx.show_progress)
    bad = [r for r in results if r.get("status") == "error"]
    for r in bad[:3]:
        first = (r.get("error") or "").strip().splitlines()
        ctx.console.print(f"[yellow]{escape(label)}: {escape(str(r.get('job_id')))} failed: "
                          f"{escape(first[-1] if first else '?')}[/]")
    if len(bad) > 3:
        ctx.console.print(f"[yellow]{label}: {len(bad) - 3} more job(s) failed[/]")
    ctx.tracker.stage_done(ctx, label)
    return results


def embed_on_workers(ctx, items: list, label: str, precision: str = "float32") -> list:
    """``items`` (memory items) with their embeddings computed on the run's workers, in
    chunks (:mod:`edv_ray.memory.embed_job`) at ``precision`` (``auto``: chosen by each
    worker's CPU), not in the driver. Items
    that carry one keep it; a chunk whose job failed is left without (the bank then embeds
    it itself, in float32), so a failure costs driver time, never an item."""
    from edv_ray.memory.embed_job import CHUNK, EmbedJob

    missing = [i for i, it in enumerate(items) if not it.embedding]
    # each distinct text once: an item approved by two verifiers sits in both private
    # banks, and its vector is its text's
    texts = list(dict.fromkeys(items[i].text for i in missing))
    if not texts:
        return items
    jobs = [EmbedJob(job_id=f"embed:{n}", texts=texts[k:k + CHUNK], precision=precision)
            for n, k in enumerate(range(0, len(texts), CHUNK))]
    got = {r["job_id"]: r for r in ctx.runner.run_jobs(jobs, label=label,
                                                       show_progress=ctx.show_progress)}
    vectors: dict[str, list[float]] = {}
    for job in jobs:
        r = got.get(job.job_id, {})
        if r.get("status") != "ok":
            ctx.console.print(f"[yellow]{escape(label)}: {job.job_id} failed; the driver "
                              f"embeds its {len(job.texts)} text(s)[/]")
            continue
        vectors.update((t, vec.tolist()) for t, vec in zip(job.texts, r["vectors"], strict=True))
    out = list(items)
    for i in missing:
        if items[i].text in vectors:
            out[i] = items[i].model_copy(update={"embedding": vectors[items[i].text]})
    return out
