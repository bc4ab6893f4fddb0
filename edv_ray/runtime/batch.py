"""Batch layer: fan episode specs out over threaded Ray workers, with progress.

* at most ``concurrency`` episodes in flight, spread over ``workers`` actors;
* a worker that dies (actor crash) is restarted by Ray; its in-flight episodes become
  error rows written by the driver, never silently lost;
* an episode still running ``timeout_s + grace`` after submission becomes an error
  row (the in-worker deadline normally fires first);
* the progress bar shows done/total, pass rate so far, errors and tokens so far.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from edv_ray.config import RunConfig
from edv_ray.results.store import RunStore
from edv_ray.runtime.episode import error_row, summary
from edv_ray.runtime.spec import EpisodeSpec

TIMEOUT_GRACE_S = 60.0


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

    def __init__(self, cfg: RunConfig, run_dir: str) -> None:
        import ray

        from edv_ray.runtime.actors import EpisodeWorker

        rt = cfg.runtime
        self.concurrency = rt.concurrency
        per_worker = max(1, math.ceil(rt.concurrency / rt.workers))
        self.workers = [
            EpisodeWorker.options(max_concurrency=per_worker).remote(
                run_dir, cfg.llm.timeout_s, cfg.llm.max_retries)
            for _ in range(rt.workers)
        ]
        ray.get([w.ready.remote() for w in self.workers])
        self.store = RunStore(run_dir)

    def run(self, specs: list[EpisodeSpec], label: str = "episodes",
            on_result: Callable[[dict[str, Any]], None] | None = None,
            show_progress: bool = True) -> BatchStats:
        import ray

        stats = BatchStats()
        queue = list(specs)
        inflight: dict[Any, tuple[EpisodeSpec, float]] = {}
        rr = 0
        with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[line]}"), TimeElapsedColumn(),
                      disable=not show_progress, transient=False) as bar:
            tid = bar.add_task(label, total=len(specs), line=stats.line())
            while queue or inflight:
                while queue and len(inflight) < self.concurrency:
                    spec = queue.pop(0)
                    worker = self.workers[rr % len(self.workers)]
                    rr += 1
                    inflight[worker.run.remote(spec.model_dump_json())] = (spec, time.monotonic())
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in ready:
                    spec, _t = inflight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as err:  # actor died / task crashed
                        result = self._driver_error(spec, f"{type(err).__name__}: {err}")
                    stats.add(result)
                    if on_result:
                        on_result(result)
                now = time.monotonic()
                for ref, (spec, t0) in list(inflight.items()):
                    if now - t0 > spec.timeout_s + TIMEOUT_GRACE_S:
                        ray.cancel(ref, force=False)
                        inflight.pop(ref)
                        stats.add(self._driver_error(
                            spec, f"EpisodeTimeout: no result after {now - t0:.0f}s"))
                bar.update(tid, completed=stats.done, line=stats.line())
        return stats

    def _driver_error(self, spec: EpisodeSpec, message: str) -> dict[str, Any]:
        row = error_row(spec, message)
        self.store.write_episode(spec.stage, row, [])
        return summary(row)

    def shutdown(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers.clear()
