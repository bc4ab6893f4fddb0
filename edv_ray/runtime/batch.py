"""Batch layer: fan episode specs out over threaded Ray workers, with progress.

* at most ``concurrency`` episodes in flight, spread over ``workers`` actors (a freed slot
  is refilled on the least-loaded worker, so no worker queues while another idles);
* a worker that dies (actor crash) is restarted by Ray; its in-flight episodes become
  error rows written by the driver, never silently lost;
* an episode still running ``timeout_s + grace`` after submission becomes an error
  row (the in-worker deadline normally fires first);
* the progress bar shows done/total, pass rate so far, errors and tokens so far.
"""

from __future__ import annotations

import math
import os
import uuid
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from edv_ray.config import RunConfig
from edv_ray.results.store import RunStore
from edv_ray.runtime.episode import error_row, summary
from edv_ray.runtime.spec import EpisodeSpec

TIMEOUT_GRACE_S = 60.0
COMPACT_EVERY = 2000  # finished episodes between compactions of their per-episode files


@dataclass
class BatchStats:
    done: int = 0
    ok: int = 0
    successes: int = 0
    errors: int = 0
    tokens: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)

    def add(self, s: dict[str, Any]) -> None:
        self.done += 1
        self.results.append(s)
        if s["status"] == "ok":
            self.ok += 1
            self.successes += int(bool(s["success"]))
        else:
            self.errors += 1
        self.tokens += sum(int(s.get(k) or 0) for k in (
            "agent_prompt_tokens", "agent_completion_tokens",
            "user_prompt_tokens", "user_completion_tokens"))

    def line(self) -> str:
        rate = f"{self.successes / self.ok:.2f}" if self.ok else "-"
        return f"pass {rate} | errors {self.errors} | tokens {self.tokens:,}"


class EpisodeRunner:
    """Owns the worker actors for one run; reusable across stages and epochs."""

    def __init__(self, cfg: RunConfig, run_dir: str, servers: dict | None = None) -> None:
        """``servers``: first URL → supervised server actor (ServedPool.actor_by_url)."""
        import ray

        from edv_ray.runtime.actors import EpisodeWorker

        rt = cfg.runtime
        self.concurrency = rt.concurrency
        per_worker = max(1, math.ceil(rt.concurrency / rt.workers))
        # API keys and live server URLs reach the workers (possibly on other nodes) from
        # a small named actor that holds them in memory (see actors.RunState); each
        # worker fetches them on start and on every restart.
        from edv_ray.runtime.actors import RunState

        keys = {m.api_key_env: os.environ[m.api_key_env] for m in cfg.models.values()
                if m.api_key_env and m.api_key_env in os.environ}
        name = f"edv-run-state-{uuid.uuid4().hex}"  # a name, not a handle, reaches the workers
        self._state = RunState.options(name=name).remote(keys, dict(servers or {}))
        llm = dict(timeout_s=cfg.llm.timeout_s, max_retries=cfg.llm.max_retries,
                   retry_budget_s=cfg.llm.retry_budget_s,
                   breaker_threshold=cfg.llm.breaker_threshold)
        self.workers = [
            EpisodeWorker.options(max_concurrency=per_worker).remote(run_dir, llm, name)
            for _ in range(rt.workers)
        ]
        ray.get([w.ready.remote() for w in self.workers])
        self.store = RunStore(run_dir)

    def run(self, specs: list[EpisodeSpec], label: str = "episodes",
            show_progress: bool = True) -> BatchStats:
        """Run episode specs; every spec ends as a row (ok or error) on disk.

        Every ``COMPACT_EVERY`` finished episodes, the per-episode files written so far are
        merged into a segment in a background thread (``results.store.compact_stage``), so
        a stage never holds more than a few thousand small files: DuckDB views (resume,
        live tracking, reports) stay fast however long the run."""
        from concurrent.futures import ThreadPoolExecutor

        from edv_ray.results.store import compact_stage

        stats = BatchStats()
        stages = sorted({s.stage for s in specs})
        compactor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edv-compact")
        pending: list = []

        def on_result(result: dict[str, Any]) -> None:
            stats.add(result)
            if stats.done % COMPACT_EVERY == 0 and all(f.done() for f in pending):
                pending[:] = [compactor.submit(compact_stage, self.store.run_dir, stage,
                                               min_files=COMPACT_EVERY) for stage in stages]

        try:
            self._fan_out(specs, lambda w, s: w.run.remote(s.model_dump_json()),
                          self._driver_error, on_result, stats.line, label, show_progress)
        finally:
            compactor.shutdown(wait=True)
        for f in pending:
            f.result()  # a compaction error is an error of the run (nothing was lost)
        return stats

    def run_jobs(self, jobs: list, label: str, show_progress: bool = True) -> list[dict[str, Any]]:
        """Run method stage jobs (pydantic models with ``job_id``, ``timeout_s`` and
        ``handler`` = ``"module:function"``). A failed job leaves no marker on disk
        (resume re-runs it); its summary has status=error."""
        results: list[dict[str, Any]] = []

        def failed(job, message: str) -> dict[str, Any]:
            return {"job_id": job.job_id, "status": "error", "error": message}

        def line() -> str:
            errors = sum(r["status"] == "error" for r in results)
            return f"errors {errors}"

        self._fan_out(jobs, lambda w, j: w.run_job.remote(j.handler, j.model_dump_json()), failed,
                      results.append, line, label, show_progress)
        return results

    def _fan_out(self, items: list, submit: Callable, failed: Callable, on_result: Callable,
                 line: Callable[[], str], label: str, show_progress: bool) -> None:
        import ray

        queue = list(items)
        inflight: dict[Any, tuple[Any, float, int]] = {}
        load = [0] * len(self.workers)  # in flight per worker: refill the one that freed up
        done = 0
        with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[line]}"), TimeElapsedColumn(),
                      disable=not show_progress, transient=False) as bar:
            tid = bar.add_task(label, total=len(items), line=line())
            while queue or inflight:
                while queue and len(inflight) < self.concurrency:
                    item = queue.pop(0)
                    w = load.index(min(load))
                    load[w] += 1
                    inflight[submit(self.workers[w], item)] = (item, time.monotonic(), w)
                ready, rest = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                if ready and rest:  # and everything else that is done by now
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                for ref in ready:
                    item, _t, w = inflight.pop(ref)
                    load[w] -= 1
                    try:
                        result = ray.get(ref)
                    except Exception as err:  # actor died / task crashed
                        result = failed(item, f"{type(err).__name__}: {str(err)[:2000]}")
                    on_result(result)
                    done += 1
                now = time.monotonic()
                for ref, (item, t0, w) in list(inflight.items()):
                    if now - t0 > item.timeout_s + TIMEOUT_GRACE_S:
                        ray.cancel(ref, force=False)
                        inflight.pop(ref)
                        load[w] -= 1
                        on_result(failed(item, f"Timeout: no result after {now - t0:.0f}s"))
                        done += 1
                bar.update(tid, completed=done, line=line())

    def _driver_error(self, spec: EpisodeSpec, message: str) -> dict[str, Any]:
        row = error_row(spec, message)
        self.store.write_episode(spec.stage, row, [])
        return summary(row)

    def shutdown(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers.clear()
        ray.kill(self._state)
