"""Batch layer: fan episode specs out over threaded Ray workers, with progress.

* at most ``concurrency`` episodes run at once: each worker actor runs its share of them
  (its run slots), plus ``PREFETCH`` queued on it, in threads waiting for a slot, so a
  finished episode's slot starts the next one without waiting for the driver — nor, while
  the worker is not CPU-bound, for its own write (``results.group_commit``). Work goes to
  the worker with the most free room, so no worker queues while another idles;
* a stage's first ``concurrency`` episodes start ``runtime.start_interval_s`` apart, after
  each worker has built the benchmark's shared state (``Environment.warm_up``): episodes
  started in one burst call the model in one burst, the answers come back together and
  each wave queues on the workers' event loops — waves that then last the whole run;
* workers are spread over the cluster's nodes (each on the node with the fewest, the
  driver's node last), not stacked on the driver's;
* a worker that dies is restarted by Ray on its node, or, when its node left the cluster,
  replaced on another; it gets no work until it answers. Each of its in-flight episodes
  gets an error row written by the driver and runs again once as the next attempt (a
  second loss leaves the error row for ``--resume``): never silently lost, never counted
  twice;
* an episode still running ``timeout_s + grace`` after it started (a queued one: after
  one of its worker's threads freed up) becomes an error row (the in-worker deadline
  normally fires first; looked for once a second, among the oldest running only:
  ``inflight.InFlight``);
* the progress bar shows done/total, pass rate so far, errors and tokens so far (redrawn
  at most 4 times a second); once a result is ready the driver gathers what else ends
  within ``GATHER_S`` (results end in clumps) and fetches them with one ``ray.get``: one
  pass of the loop — a ``ray.wait`` over every ref in flight — per clump, not per result
  (driver CPU per stage job −22 to −35 %, per episode −6 %, wall unchanged:
  experiments/bench/scale_simulated.py, issue 31).
"""

from __future__ import annotations

import collections
import json
import os
import uuid
import time
from dataclasses import dataclass
from typing import Any, Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from edv_ray.config import RunConfig
from edv_ray.results.store import RunStore
from edv_ray.runtime.episode import error_row, summary
from edv_ray.runtime.spec import EpisodeSpec
# COMPACT_EVERY is read here at each fan-out (plan.py reads it here too; tests lower it here)
from edv_ray.runtime.compaction import COMPACT_EVERY, Compaction
from edv_ray.runtime.inflight import InFlight
from edv_ray.runtime.worker_layout import (cpu_share, shares, spread_over_nodes,  # noqa: F401
                                           worker_lost)

TIMEOUT_GRACE_S = 60.0
# episodes queued on a worker beyond the ones it runs: episodes end in clumps (64 threads,
# one answer burst), and a queue of 2 ran dry between driver round trips (slots idle ~35–60
# ms an episode at 128 in flight; ~28 ms with 8, experiments/bench/scale.py). 16: an
# episode waiting for its batch's write (up to group_commit.MAX_WAIT_S) may have given its
# run slot to a queued one, and still counts here until its result is back
PREFETCH = 16
# after the first result, how long the driver gathers more before handling them: each
# pass of the loop costs a ray.wait over every ref in flight; the queued PREFETCH keeps
# the workers busy meanwhile
GATHER_S = 0.05
# how long a stage of jobs waits for its workers' GC settle (one collection, well under a
# second) before it starts anyway
SETTLE_WAIT_S = 30.0


@dataclass
class BatchStats:
    done: int = 0
    ok: int = 0
    successes: int = 0
    errors: int = 0
    tokens: int = 0

    def add(self, s: dict[str, Any]) -> None:
        # counts only: keeping each episode's summary grew the driver by ~1.7 kB an
        # episode for the whole stage (~170 MB at 10⁵ episodes; experiments/bench/
        # scale_simulated.py)
        self.done += 1
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

    def __init__(self, cfg: RunConfig, run_dir: str, servers: dict | None = None,
                 fallbacks: dict | None = None) -> None:
        """``servers``: first URL → supervised server actor (ServedPool.actor_by_url);
        ``fallbacks``: first URL → the other replicas' (ServedPool.fallbacks)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rt = cfg.runtime
        self.concurrency = rt.concurrency
        self.start_interval_s = rt.start_interval_s
        self.shares = shares(rt.concurrency, rt.workers)
        # API keys and live server URLs reach the workers (possibly on other nodes) from
        # a small named actor that holds them in memory (see actors.RunState); each
        # worker fetches them on start and on every restart.
        from edv_ray.runtime.actors import RunState

        keys = {m.api_key_env: os.environ[m.api_key_env] for m in cfg.models.values()
                if m.api_key_env and m.api_key_env in os.environ}
        from edv_ray.llm.client import served_keys

        engine_keys = served_keys(servers or {})  # each self-served engine's run key
        name = f"edv-run-state-{uuid.uuid4().hex}"  # a name, not a handle, reaches the workers
        # on the driver's node: it must outlive any other node of the cluster
        self.driver_node = ray.get_runtime_context().get_node_id()
        here = NodeAffinitySchedulingStrategy(node_id=self.driver_node, soft=False)
        self._state = RunState.options(name=name, scheduling_strategy=here).remote(
            keys, dict(servers or {}), dict(fallbacks or {}), engine_keys)
        llm = dict(timeout_s=cfg.llm.timeout_s, max_retries=cfg.llm.max_retries,
                   retry_budget_s=cfg.llm.retry_budget_s,
                   breaker_threshold=cfg.llm.breaker_threshold, transport=cfg.llm.transport)
        self._worker_args = (run_dir, llm, name)
        self.nodes = spread_over_nodes(len(self.shares), self.driver_node)
        self.workers = [self._spawn(share, node) for share, node in zip(self.shares, self.nodes)]
        ray.get([w.ready.remote() for w in self.workers])
        self.store = RunStore(run_dir)
        self._reran: set[str] = set()  # episodes re-run after their worker died

    def _spawn(self, share: int, node: str):
        """A worker pinned to ``node`` (Ray restarts it there after a crash; if the node
        leaves the cluster, :meth:`_probe` replaces it on another)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from edv_ray.runtime.actors import EpisodeWorker

        where = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        # threads for the queued calls too: they wait on the worker's ``share`` run slots
        return EpisodeWorker.options(max_concurrency=share + PREFETCH + 1,
                                     scheduling_strategy=where).remote(
            *self._worker_args, cpu_share=cpu_share(node, self.nodes.count(node)), slots=share)

    def placement(self) -> dict:
        """Which node each worker started on (and the driver's), as ``workers.json``."""
        return {"driver_node": self.driver_node, "workers": self.nodes}

    def placement_line(self) -> str:
        count = collections.Counter(self.nodes)
        where = ", ".join(f"{n[:8]}{' (driver)' if n == self.driver_node else ''}: {k}"
                          for n, k in sorted(count.items()))
        return f"episode workers: {len(self.workers)} on {len(count)} node(s) ({where})"

    def run(self, specs: list[EpisodeSpec], label: str = "episodes",
            show_progress: bool = True) -> BatchStats:
        """Run episode specs; every spec ends as a row (ok or error) on disk.

        Every ``COMPACT_EVERY`` finished episodes, the per-episode files written so far are
        merged into a segment in a background thread (``results.store.compact_stage``), so
        a stage never holds more than a few thousand small files: DuckDB views (resume,
        live tracking, reports) stay fast however long the run."""
        stats = BatchStats()
        stages = sorted({s.stage for s in specs})
        compaction = Compaction(self.store.run_dir, lambda: stages, every=COMPACT_EVERY)

        def on_result(result: dict[str, Any]) -> None:
            stats.add(result)
            compaction.tick(stats.done)

        self._warm(specs)
        try:
            self._fan_out(specs, lambda w, s: w.run.remote(s.model_dump_json()),
                          self._driver_error, on_result, stats.line, label, show_progress,
                          rerun=self._rerun)
        finally:
            compaction.close()
        compaction.settle()
        return stats

    def _warm(self, specs: list[EpisodeSpec]) -> None:
        """Each worker builds the shared state of the specs' benchmark domains."""
        import ray

        domains: dict[str, tuple[dict, set[str]]] = {}
        for spec in specs:
            key = json.dumps(spec.benchmark, sort_keys=True, default=str)
            domains.setdefault(key, (spec.benchmark, set()))[1].add(spec.domain)
        ray.get([w.warm.remote(bench, sorted(names)) for w in self.workers
                 for bench, names in domains.values()])

    def run_jobs(self, jobs: list, label: str, show_progress: bool = True) -> list[dict[str, Any]]:
        """Run method stage jobs (pydantic models with ``job_id``, ``timeout_s`` and
        ``handler`` = ``"module:function"``). A failed job leaves no marker on disk
        (resume re-runs it); its summary has status=error."""
        results: list[dict[str, Any]] = []
        errors = [0]
        # their call files (one per job) are merged like episodes' (every COMPACT_EVERY
        # jobs): a stage of 10⁴–10⁵ jobs otherwise leaves as many one-row files for every
        # view over llm_calls (token_use, tokens_by_stage) to open
        compaction = Compaction(self.store.run_dir, self._call_stages, tables=("llm_calls",),
                                every=COMPACT_EVERY)

        def failed(job, message: str) -> dict[str, Any]:
            return {"job_id": job.job_id, "status": "error", "error": message}

        def on_result(result: dict[str, Any]) -> None:
            results.append(result)
            errors[0] += result["status"] == "error"  # counted, not re-scanned per update
            compaction.tick(len(results))

        self._settle_workers()
        try:
            self._fan_out(jobs, lambda w, j: w.run_job.remote(j.handler, j.model_dump_json()),
                          failed, on_result, lambda: f"errors {errors[0]}", label, show_progress)
        finally:
            compaction.close()
        compaction.settle()
        return results

    def _settle_workers(self) -> None:
        """What earlier stages left alive in each worker (caches, banks): out of the next
        stage's full GC passes (``runtime.heap``), as a stage of episodes does in ``warm``.
        Only an optimisation: a worker that is lost or restarting is not waited for."""
        import ray

        refs = [w.settle.remote() for w in self.workers]
        ray.wait(refs, num_returns=len(refs), timeout=SETTLE_WAIT_S)

    def _call_stages(self) -> list[str]:
        """The stages with call files (a job may write calls under another stage)."""
        folder = self.store.run_dir / "llm_calls"
        return sorted(p.name.removeprefix("stage=") for p in folder.glob("stage=*")
                      if p.is_dir()) if folder.is_dir() else []

    def _fan_out(self, items: list, submit: Callable, failed: Callable, on_result: Callable,
                 line: Callable[[], str], label: str, show_progress: bool,
                 rerun: Callable | None = None) -> None:
        import ray

        queue = collections.deque(items)
        inflight = InFlight(self.shares, TIMEOUT_GRACE_S,
                            min((i.timeout_s for i in items), default=0.0))
        begin, first_fill = time.monotonic(), min(len(items), self.concurrency)
        started = done = 0
        next_timeouts = next_bar = begin  # timeouts read ≤ 1/s, the bar drawn ≤ 4/s
        # a worker whose actor died gets no work until it answers again (Ray restarts it,
        # maybe on another node; meanwhile tasks sent to it fail at once): worker → [probe
        # ref or None, when to probe next]
        restarting: dict[int, list] = {}
        with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[line]}"), TimeElapsedColumn(),
                      disable=not show_progress, transient=False) as bar:
            tid = bar.add_task(label, total=len(items), line=line())
            while queue or inflight:
                wait_s = 1.0
                if restarting:
                    self._probe(restarting)
                while queue:
                    room = [self.shares[i] + PREFETCH - n for i, n in enumerate(inflight.load)]
                    for i in restarting:
                        room[i] = 0
                    w = room.index(max(room))
                    if room[w] <= 0:
                        break
                    if started < first_fill:  # the first fill is paced
                        wait = begin + started * self.start_interval_s - time.monotonic()
                        if wait > 0:
                            wait_s = min(wait_s, wait)
                            break
                    item = queue.popleft()
                    ref = submit(self.workers[w], item)
                    started += 1
                    inflight.add(ref, item, w, time.monotonic())
                if not inflight:
                    time.sleep(wait_s)
                    continue
                ready, rest = ray.wait(inflight.refs(), num_returns=1, timeout=wait_s)
                if ready and rest:  # and what ends within GATHER_S: one round trip for a clump
                    ready += ray.wait(rest, num_returns=len(rest), timeout=GATHER_S)[0]
                for ref, outcome in zip(ready, _outcomes(ready)):
                    item, w, _t0 = inflight.pop(ref, time.monotonic())
                    if isinstance(outcome, Exception):  # actor died / task crashed
                        if worker_lost(outcome):
                            restarting.setdefault(w, [None, 0.0])
                        again = rerun(item, outcome) if rerun is not None else None
                        if again is not None:
                            queue.appendleft(again)
                            continue
                        outcome = failed(item, f"{type(outcome).__name__}: {str(outcome)[:2000]}")
                    on_result(outcome)
                    done += 1
                now = time.monotonic()
                if now >= next_timeouts:
                    next_timeouts = now + 1.0
                    for ref, item, t0 in inflight.overdue(now):
                        ray.cancel(ref, force=False)
                        inflight.pop(ref, now)
                        on_result(failed(item, f"Timeout: no result after {now - t0:.0f}s"))
                        done += 1
                if now >= next_bar or not (queue or inflight):
                    next_bar = now + 0.25
                    bar.update(tid, completed=done, line=line())

    def _probe(self, restarting: dict[int, list]) -> None:
        """Ask each restarting worker whether it is back (every 2 s); drop those that are.
        A worker whose node left the cluster is replaced on the least used alive node."""
        import ray

        now = time.monotonic()
        for w, state in list(restarting.items()):
            probe, next_at = state
            if probe is None:
                if now >= next_at:
                    state[0] = self.workers[w].ready.remote()
                continue
            if ray.wait([probe], timeout=0)[0]:
                try:
                    ray.get(probe)
                    del restarting[w]
                except ray.exceptions.ActorUnschedulableError:  # its node is gone
                    others = self.nodes[:w] + self.nodes[w + 1:]
                    self.nodes[w] = spread_over_nodes(1, self.driver_node, others)[0]
                    self.workers[w] = self._spawn(self.shares[w], self.nodes[w])
                    state[:] = [self.workers[w].ready.remote(), now]
                except Exception:  # noqa: BLE001 - still restarting: ask again later
                    state[:] = [None, now + 2.0]

    def _rerun(self, spec: EpisodeSpec, err: Exception) -> EpisodeSpec | None:
        """An episode whose worker died (its node left, the process crashed) runs again,
        once, as its next attempt; the lost attempt keeps an error row."""
        if not worker_lost(err) or spec.episode_id in self._reran:
            return None
        self._reran.add(spec.episode_id)
        self._driver_error(spec, f"{type(err).__name__} (worker lost; run again as attempt "
                                 f"{spec.attempt + 1}): {str(err)[:1500]}")
        return spec.model_copy(update={"attempt": spec.attempt + 1})

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


def _outcomes(refs: list) -> list:
    """Each ref's value, or the exception its ``ray.get`` raises: one ``ray.get`` for
    them all, one by one only when one of them failed."""
    import ray

    try:
        return ray.get(refs)
    except Exception:  # noqa: BLE001 - which one failed, and how, is asked ref by ref
        out = []
        for ref in refs:
            try:
                out.append(ray.get(ref))
            except Exception as err:  # noqa: BLE001 - the caller records it
                out.append(err)
        return out
