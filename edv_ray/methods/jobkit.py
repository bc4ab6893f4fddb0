"""What every method's worker-side stage job needs: a role's model binding, a JSON
caller (constrained decoding where the engine supports it, strict validation always),
prompt budgets, call attribution, reading stored episodes and writing call rows.

Jobs are pydantic models with ``job_id``, ``timeout_s`` and ``handler``
(``"module:function"``, a function ``(job_json, client) -> summary``); the runtime
resolves the handler by name.
"""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from edv_ray.config import Sampling, parse_benchmark
from edv_ray.methods.answers import Caller, ask_json, decoding_schema, parse_json  # noqa: F401
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.prompts.budget import fit_prompt
from edv_ray.results.schema import CALL_SCHEMA

SHARED_THREADS = 256  # threads of the process's pool for a job's concurrent calls

_pool_lock = threading.Lock()
_pool: list[ThreadPoolExecutor] = []


def _shared_pool() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(SHARED_THREADS, thread_name_prefix="edv-calls"))
        return _pool[0]


def map_concurrently(fn: Callable[[Any], Any], items: list, bound: int) -> list:
    """``[fn(x) for x in items]`` with at most ``bound`` of them running at once, on one
    pool shared by every job of the process (threads made once: a pool per job spent about
    a tenth of a verify worker's CPU starting threads). Every call has ended when it
    returns or raises (the first error, after the others finished)."""
    gate = threading.BoundedSemaphore(max(1, bound))
    futures = []
    for x in items:
        gate.acquire()
        f = _shared_pool().submit(fn, x)
        f.add_done_callback(lambda _f: gate.release())
        futures.append(f)
    wait(futures)
    return [f.result() for f in futures]


class RoleBinding(BaseModel):
    """An agent acting in a stage role: its endpoint, sampling, JSON mode, and the real
    context window of its model (:func:`edv_ray.serving.context.model_context`)."""

    endpoint: Endpoint | None = None
    sampling: Sampling | None = None
    json_mode: str = "schema"
    n_ctx: int | None = None  # required by :func:`budget`; set by :func:`role_binding`


def role_binding(ctx, agent: str, kind: str, sampling: Sampling | None = None) -> dict[str, Any]:
    """Driver side: the binding fields of ``agent`` for a stage job of ``kind``."""
    from edv_ray.serving.context import model_context

    a = ctx.cfg.agent(agent)
    mc = ctx.cfg.models[a.model]
    return dict(endpoint=ctx.pool.agent_endpoint(ctx.cfg, agent, f"{kind}|{agent}"),
                sampling=sampling or a.sampling, json_mode=mc.json_mode,
                n_ctx=model_context(a.model, mc))


def env_of(benchmark: dict[str, Any]):
    from edv_ray.envs.protocol import get_env

    bench = parse_benchmark(benchmark)
    return get_env(bench.name), bench


def load_episode(run_dir: str, stage: str, episode_id: str) -> dict[str, Any]:
    """The latest attempt of a stored episode (its own file, or the stage's compacted
    segments — see ``results.episode_lookup``, whose lookups do not grow with the stage
    and which tolerates a compaction running meanwhile)."""
    from edv_ray.results.episode_lookup import find_episode

    folder = Path(run_dir) / "episodes" / f"stage={stage}"
    row = find_episode(folder, episode_id)
    if row is None:
        raise FileNotFoundError(f"episode {episode_id} has no file in {folder}")
    return row


WHOLE = 10**9  # a transcript is rendered whole; only the prompt budget may shorten it


def transcript(env, row: dict[str, Any]) -> str:
    """A stored run as the judging roles see it: whole (the budget shortens, never this)."""
    return env.render_trajectory(json.loads(row["messages_json"] or "[]"), WHOLE)


def with_evidence(ctx: CallContext, messages: list[dict[str, Any]]) -> CallContext:
    """``ctx`` carrying the evidence figures of a budgeted prompt (a
    :class:`~edv_ray.prompts.budget.FittedPrompt`), so its call rows record them."""
    ev = getattr(messages[-1].get("content") if messages else None, "evidence", None)
    if ev is None:
        return ctx
    return replace(ctx, evidence_chars=ev.chars, evidence_kept=ev.kept,
                   evidence_final_kept=ev.final_kept)


def json_caller(client: LLMClient, binding: RoleBinding, ctx: CallContext,
                ledger: CallLedger) -> Caller:
    def call(messages, schema):
        rf = None
        if binding.json_mode == "schema":
            rf = {"type": "json_object", "schema": schema}
        elif binding.json_mode == "json_object":
            rf = {"type": "json_object"}
        out = client.complete(binding.endpoint, messages, ctx=with_evidence(ctx, messages),
                              ledger=ledger, sampling=binding.sampling, response_format=rf)
        return out.content or ""
    return call


def budget(binding: RoleBinding, who: str):
    """``fit(render, transcripts)`` → a prompt within the model's real context: the
    transcripts whole when they fit, else shortened by the evidence rule; the prompt
    carries what it kept (recorded with its calls by :func:`json_caller`)."""
    if binding.n_ctx is None:
        raise ValueError(f"{who}: the binding has no n_ctx (build it with role_binding)")

    def fit(render, parts):
        return fit_prompt(render, parts, n_ctx=binding.n_ctx,
                          answer_tokens=binding.sampling.max_tokens, who=who)
    return fit


def stage_ctx(job, role: str, agent: str, trial: int = 0) -> CallContext:
    return CallContext(run_id=job.run_id, stage=job.kind, role=role, agent=agent,
                       domain=job.domain, task_id=job.task_id, epoch=job.epoch, trial=trial,
                       episode_id=f"{job.kind}-e{job.epoch}-{job.domain}-{job.task_id}-t{trial}")


def write_calls(job, ledger: CallLedger, name: str) -> None:
    """Call rows of a stage job under ``llm_calls/stage=<stage of each call>/`` (the
    job's kind unless a call was made under another stage, e.g. EDV's poison votes under
    ``verify_audit``), through the process's group commit (``RunStore.write_calls``:
    returns once they are on disk; alone, a file of unique name)."""
    from edv_ray.results.store import RunStore

    by_stage: dict[str, list] = {job.kind: []}
    for r in ledger.rows():
        by_stage.setdefault(r.get("stage") or job.kind, []).append(
            {k: r.get(k) for k in CALL_SCHEMA.names})
    store = RunStore(job.run_dir)
    for stage, rows in by_stage.items():
        if not rows and stage != job.kind:
            continue
        store.write_calls(stage, rows, name.replace(".parquet", f".{uuid.uuid4().hex[:8]}.parquet"))
