"""Ray actors: threaded episode runners (server actors: serving.vllm_server.SupervisedServer).

Episodes wait on HTTP, not CPU: a runner is one process (τ²-bench and litellm imported
once) running many episodes in threads (``max_concurrency``), not a process per episode.
Actors reserve no CPUs (``num_cpus=0``): on a 2-core laptop the model servers use the
cores, and Ray's CPU accounting would otherwise cap concurrency at 2.
"""

from __future__ import annotations

import ray

from edv_ray.runtime import heap

ROUTE_TTL_S = 2.0  # how long a worker trusts a server's looked-up URL
DOWN_S = 10.0  # a server that did not answer is skipped this long before it is asked again


@ray.remote(num_cpus=0, max_concurrency=16)
class RunState:
    """What the run's workers fetch from the driver, held in memory only: API keys (never
    in a runtime_env, whose env_vars Ray logs), the key each self-served engine requires
    (``engine_keys``: first URL → key; see runtime.servers) and the live URL of each model
    server (a supervised server restarted by Ray comes back on a new port, maybe on another
    node). While a server does not answer (its node left, it restarts), its calls go to
    the next replica of its group that does (``fallbacks``: first URL → the others')."""

    def __init__(self, env: dict[str, str], servers: dict,
                 fallbacks: dict[str, list[str]] | None = None,
                 engine_keys: dict[str, str] | None = None) -> None:
        self._env = dict(env)
        self._engine_keys = dict(engine_keys or {})
        self._servers = dict(servers)  # first URL → supervised server actor
        self._fallbacks = dict(fallbacks or {})
        self._down_until: dict[str, float] = {}

    def secrets(self) -> dict[str, str]:
        return dict(self._env)

    def engine_keys(self) -> dict[str, str]:
        return dict(self._engine_keys)

    def urls(self) -> list[str]:
        return list(self._servers)

    def _live(self, url: str, skip_down: bool) -> str | None:
        import time

        actor = self._servers.get(url)
        if actor is None or (skip_down and time.monotonic() < self._down_until.get(url, 0.0)):
            return None
        try:
            return ray.get(actor.info.remote(), timeout=3.0).base_url
        except Exception:  # noqa: BLE001 - gone or restarting
            self._down_until[url] = time.monotonic() + DOWN_S
            return None

    def current_url(self, url: str) -> str | None:
        """The server's URL now; while it does not answer, the URL of the first other
        replica of its group that does (None when none does, or when unknown). A lone
        replica is asked every time: its calls wait for it (on the circuit breaker)."""
        others = self._fallbacks.get(url, [])
        for candidate in [url, *others]:
            live = self._live(candidate, skip_down=bool(others))
            if live is not None:
                return live
        return None


def route_live(state, urls: list[str]) -> None:
    """Resolve each self-served URL through the RunState on every attempt (cached for
    ``ROUTE_TTL_S``), so calls follow a restarted server to its new port."""
    import threading
    import time

    from edv_ray.llm.client import set_api_base_resolver

    for url in urls:
        cache, lock = {"t": 0.0, "url": None}, threading.Lock()

        def resolve(url=url, cache=cache, lock=lock) -> str | None:
            with lock:
                if time.monotonic() - cache["t"] > ROUTE_TTL_S:
                    try:
                        cache["url"] = ray.get(state.current_url.remote(url), timeout=5.0)
                    except Exception:  # noqa: BLE001 - the configured URL stands
                        cache["url"] = None
                    cache["t"] = time.monotonic()
                return cache["url"]
        set_api_base_resolver(url, resolve)


def register_engine_keys(keys: dict[str, str]) -> None:
    """This process's clients send each self-served engine its key (looked up by the
    endpoint's first URL, which a re-routed call keeps: a run's engines share one key)."""
    from edv_ray.llm.client import set_served_key

    for url, key in keys.items():
        set_served_key(url, key)


@ray.remote(num_cpus=0, max_restarts=-1)
class EpisodeWorker:
    def __init__(self, run_dir: str, llm: dict, state_name: str | None = None,
                 cpu_share: float | None = None, slots: int | None = None) -> None:
        """``cpu_share``: the CPUs it may use (``worker_layout.cpu_share``). ``slots``: how
        many of its episodes and stage jobs run at once (its share of the run's in-flight
        episodes); the actor has more threads than that, so the calls queued on it wait
        here, each for a slot, and while the worker is not CPU-bound one starts as soon as
        another episode submits its last write (``results.group_commit``), not once that
        write is on disk and Ray hands the thread the next call."""
        with heap.warming_up():  # imports without GC passes; what they leave, frozen after
            self._set_up(run_dir, llm, state_name, cpu_share, slots)

    def _set_up(self, run_dir: str, llm: dict, state_name: str | None,
                cpu_share: float | None, slots: int | None) -> None:
        import os
        import threading

        if cpu_share:  # before anything imports torch (it sizes its pool on import)
            os.environ.setdefault("OMP_NUM_THREADS", str(max(1, int(cpu_share))))

        from edv_ray.envs.benchmark_logs import route_benchmark_logs
        from edv_ray.llm.client import LLMClient
        from edv_ray.llm.transport import warm_up
        from edv_ray.results.store import RunStore, committer

        if state_name is not None:  # the run's RunState, by name — see EpisodeRunner
            state = ray.get_actor(state_name)
            os.environ.update(ray.get(state.secrets.remote()))
            register_engine_keys(ray.get(state.engine_keys.remote()))
            route_live(state, ray.get(state.urls.remote()))
        route_benchmark_logs(run_dir)  # warnings to the console, every record to logs/
        self._client = LLMClient(**llm)
        self._store = RunStore(run_dir)
        if cpu_share:
            committer().cpu.available = cpu_share
        self._slots = threading.BoundedSemaphore(slots) if slots else None
        warm_up()  # the model-call path's first-use cost, paid before any episode waits on it

    def ready(self) -> bool:
        return True

    def node(self) -> str:
        """The Ray node this worker runs on."""
        return ray.get_runtime_context().get_node_id()

    def warm(self, benchmark: dict, domains: list[str]) -> None:
        """Build what episodes of these domains share (databases, tool schemas) before
        the first of them starts: otherwise a stage's first episodes all wait behind it."""
        from edv_ray.config import parse_benchmark
        from edv_ray.envs.protocol import get_env

        bench = parse_benchmark(benchmark)
        env = get_env(bench.name)
        # the domains' shared state joins what later GC passes skip (no episode runs now)
        with heap.warming_up():
            for domain in domains:
                try:
                    env.warm_up(bench, domain)
                except Exception:  # noqa: BLE001 - each episode then records the error itself
                    continue

    def settle(self) -> int:
        """Before a stage of jobs: what is alive now, out of later full GC passes."""
        return heap.settle()

    def run(self, spec_json: str) -> dict:
        from edv_ray.runtime.episode import run_episode
        from edv_ray.runtime.spec import EpisodeSpec

        with self._store.work(self._slots):  # its write may wait for others' (group commit)
            return run_episode(EpisodeSpec.model_validate_json(spec_json), self._client,
                               self._store)

    def run_job(self, handler: str, job_json: str) -> dict:
        """A method's stage job (e.g. distill / verify one task): ``handler`` names the
        method's function as ``module:function`` (``(job_json, client) -> summary``); it
        is resolved by name, so the runtime imports no method."""
        from edv_ray.runtime.episode import resolve_provider

        with self._store.work(self._slots):
            return resolve_provider(handler)(job_json, self._client)
