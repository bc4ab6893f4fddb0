"""Start the servers a run needs and hand out endpoints.

Each (model, role group) gets its own ``replicas`` llama.cpp servers: agents and the
user simulator alternate within an episode, and a llama.cpp server keeps one prefix
cache, so sharing one server re-evaluates the whole prompt at every turn. An episode
sticks to one replica of each group (hash of its id). External endpoints are checked
for reachability before any episode starts.

Every engine a run starts (llama.cpp, vLLM, simulated) requires the run's random API key
(``secrets.token_urlsafe``), made here when the servers start: it reaches each server
actor as a Ray argument and its engine in an environment variable, the clients of this
process through :func:`edv_ray.llm.client.set_served_key` and the run's workers through
its ``RunState`` actor — never a file, a log line, W&B or the config.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from edv_ray.config import ConfigError, ModelConfig, RunConfig
from edv_ray.llm.endpoints import Endpoint, set_served_key  # no model-call client (litellm)
from edv_ray.serving.embedded import EMBEDDED_MODELS, resolve_weights
from edv_ray.serving.protocol import ServerInfo
from edv_ray.serving.replicas import StickyReplicaPicker


def served_name(model_name: str, mc: ModelConfig) -> str:
    emb = EMBEDDED_MODELS.get(mc.weights or "")
    return emb.served_name if emb else model_name


def agent_group(cfg: RunConfig, agent: str) -> str:
    """The server group an agent's calls go to (see ModelConfig.server_per)."""
    model = cfg.agent(agent).model
    return f"agent:{agent}" if cfg.models[model].server_per == "agent" else "agent"


def role_groups(cfg: RunConfig) -> dict[str, set[str]]:
    """model name → the server groups that use it ("agent[:NAME]", "user")."""
    groups: dict[str, set[str]] = {}
    for a in cfg.agents:
        groups.setdefault(a.model, set()).add(agent_group(cfg, a.name))
    if cfg.roles.user_simulator is not None:
        groups.setdefault(cfg.roles.user_simulator.model, set()).add("user")
    return groups


def check_models(cfg: RunConfig) -> None:
    """Fail fast: weights present and verified, endpoints reachable, keys set."""
    for name, mc in cfg.models.items():
        if mc.engine == "llama_cpp":
            try:
                resolve_weights(mc.weights or "")
            except Exception as err:
                raise ConfigError(f"model {name!r}: {err}") from None
        elif mc.engine == "endpoint":
            if mc.api_key_env and mc.api_key_env not in os.environ:
                raise ConfigError(f"model {name!r}: environment variable {mc.api_key_env} is not set")
            if mc.api_base:
                check_endpoint(name, mc)


def check_endpoint(name: str, mc: ModelConfig) -> None:
    """``GET /models`` with the model's key: unreachable, 401/403 (key refused) and 404
    (no OpenAI-compatible API there) are clear errors naming the model."""
    headers = {}
    if mc.api_key_env:
        headers["Authorization"] = f"Bearer {os.environ[mc.api_key_env]}"
    url = (mc.api_base or "").rstrip("/") + "/models"
    try:
        resp = httpx.get(url, headers=headers, timeout=5.0)
    except httpx.HTTPError as err:
        raise ConfigError(
            f"model {name!r}: endpoint {mc.api_base} is unreachable ({type(err).__name__})") from None
    if resp.status_code in (401, 403):
        raise ConfigError(f"model {name!r}: endpoint {mc.api_base} refused the key "
                          f"(HTTP {resp.status_code}); check {mc.api_key_env or 'api_key_env'}")
    if resp.status_code == 404:
        raise ConfigError(f"model {name!r}: {url} answered 404: api_base must point at an "
                          "OpenAI-compatible API (usually ending in /v1)")
    if resp.status_code >= 400:
        raise ConfigError(f"model {name!r}: {url} answered HTTP {resp.status_code}")


@dataclass
class ServedPool:
    """Endpoints per (model, server group), each group's replicas behind a sticky picker."""

    pickers: dict[tuple[str, str], StickyReplicaPicker] = field(default_factory=dict)
    external: dict[str, Endpoint] = field(default_factory=dict)
    served: dict[str, str] = field(default_factory=dict)  # model → served name
    infos: list[ServerInfo] = field(default_factory=list)
    actors: list = field(default_factory=list)
    actor_by_url: dict = field(default_factory=dict)  # first URL → its supervised actor
    groups: list = field(default_factory=list)  # placement groups (GPU replicas)
    down: set = field(default_factory=set)  # first URLs of servers seen unreachable
    keyed: list = field(default_factory=list)  # first URLs whose key this pool registered

    def agent_endpoint(self, cfg: RunConfig, agent: str, sticky_key: str) -> Endpoint:
        return self.endpoint(cfg.agent(agent).model, agent_group(cfg, agent), sticky_key)

    def endpoint(self, model: str, group: str, sticky_key: str) -> Endpoint:
        if model in self.external:
            return self.external[model]
        picker = self.pickers.get((model, group)) or self.pickers.get((model, "*"))
        if picker is None:
            raise KeyError(f"no servers for model {model!r} (group {group})")
        return Endpoint(model, f"openai/{self.served[model]}", picker.pick(sticky_key))

    def fallbacks(self) -> dict[str, list[str]]:
        """first URL → the first URLs of the other replicas of its group (in replica
        order): where its calls go while it is unreachable."""
        out = {}
        for picker in self.pickers.values():
            urls = [picker.url(r) for r in picker.replica_ids]
            for i, url in enumerate(urls):
                out[url] = urls[i + 1:] + urls[:i]
        return out

    def layout_lines(self) -> list[str]:
        from edv_ray.serving.placement import layout_lines

        return layout_lines(self.infos)

    def write(self, run_dir: Path) -> None:
        """``servers.json``: every server as it was started (its node and GPUs included)."""
        from edv_ray.results.parquet_io import write_text_atomic

        write_text_atomic(run_dir / "servers.json",
                          json.dumps([i.model_dump() for i in self.infos], indent=1))

    def stop(self) -> None:
        """Stop every engine (servers seen unreachable are not waited for), then remove
        the actors and their placement groups."""
        import ray

        lost = {id(self.actor_by_url[u]) for u in self.down}
        live = [a for a in self.actors if id(a) not in lost]
        if live:
            try:
                ray.wait([a.stop.remote() for a in live], num_returns=len(live), timeout=60)
            except Exception:  # noqa: BLE001 - killed below either way
                pass
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for group in self.groups:
            try:
                ray.util.remove_placement_group(group)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors.clear()
        self.groups.clear()
        for url in self.keyed:
            set_served_key(url, None)
        self.keyed.clear()


def _server_actor(cfg: RunConfig, model: str, group: str, index: int, run_dir: Path,
                  strategy=None, api_key: str | None = None):
    """One supervised server actor (any engine; see serving.vllm_server.SupervisedServer).
    On a cluster its engine listens on its node's address (``host=None``), else on
    loopback; it requires ``api_key``."""
    from edv_ray.runtime.ray_setup import cluster_address
    from edv_ray.serving.vllm_server import vllm_server_actor

    mc = cfg.models[model]
    sid = f"{model}/{group.replace(':', '-')}/{index}"
    logs = str(run_dir / "logs")
    host = None if cluster_address(cfg.runtime) else "127.0.0.1"
    if mc.engine == "vllm":
        return vllm_server_actor(sid, model, mc.weights or "", engine_args=mc.engine_args,
                                 served_name=served_name(model, mc), log_dir=logs,
                                 python=mc.python, num_gpus=mc.num_gpus,
                                 scheduling_strategy=strategy, host=host, api_key=api_key)
    if mc.engine == "simulated":
        return simulated_server_actor(sid, model, mc.simulation.model_dump(mode="json"),
                                      [cfg.benchmark.model_dump(mode="json")], log_dir=logs,
                                      host=host, api_key=api_key, scheduling_strategy=strategy)
    return llama_server_actor(sid, model, mc.weights or "", served_name(model, mc),
                              n_ctx=mc.n_ctx, n_threads=mc.n_threads,
                              engine_args=mc.engine_args, log_dir=logs, host=host,
                              api_key=api_key, scheduling_strategy=strategy)


def cpu_engine_strategy(taken: list[str]):
    """Where the next engine that holds no GPU goes (simulated, llama.cpp, a CPU vLLM):
    the alive node with the fewest such engines so far (``taken``, to which it is added),
    the driver's node last — as episode workers are spread. Such an engine reserves no Ray
    resources, so Ray alone placed them anywhere: both replicas of a model on one node
    (one node lost, the model gone), engines on the driver's node. The affinity is hard:
    Ray's soft affinity put a zero-resource actor on another node than the one named (a
    local three-node cluster, one of three). An engine whose process dies restarts on its
    node; one whose node is lost stays lost, and its model's other replicas serve."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from edv_ray.runtime.worker_layout import spread_over_nodes

    node = spread_over_nodes(1, ray.get_runtime_context().get_node_id(), taken)[0]
    taken.append(node)
    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def replica_gpus(model: str, mc: ModelConfig) -> int:
    """GPUs one vLLM replica's actor reserves (0: a CPU build, or vLLM's Ray executor,
    which places its own workers)."""
    from edv_ray.serving.catalog import vllm_engine_args
    from edv_ray.serving.vllm_server import vllm_actor_options

    if mc.engine != "vllm" or mc.num_gpus == 0:
        return 0
    merged = vllm_engine_args(mc.weights or "", served_name(model, mc), mc.engine_args)
    return int(vllm_actor_options(merged)["num_gpus"])


def llama_server_actor(server_id: str, model_name: str, weights: str, served: str, **kwargs):
    """A supervised llama.cpp server actor (starts its engine on creation; ``start`` → info).
    It reserves no Ray CPUs: the engine's threads use the cores anyway."""
    from edv_ray.serving.llama_cpp_server import LlamaCppServer

    strategy = kwargs.pop("scheduling_strategy", None)
    return _cpu_server_actor(LlamaCppServer, dict(server_id=server_id, model_name=model_name,
                                                  weights=weights, served_name=served, **kwargs),
                             strategy)


def _cpu_server_actor(server_cls: type, kwargs: dict, strategy=None):
    """A supervised server actor reserving no Ray CPUs (its process uses the cores anyway),
    placed by ``strategy`` (:func:`cpu_engine_strategy`) when given."""
    from edv_ray.serving.vllm_server import server_actor_options, supervised_actor_class

    cls = supervised_actor_class(**server_actor_options(gpus=0, num_cpus=0, max_restarts=2,
                                                        scheduling_strategy=strategy))
    return cls.remote(server_cls, kwargs, interval_s=30.0)


def simulated_server_actor(server_id: str, model_name: str, profile: dict,
                           benchmarks: list[dict], log_dir: str | None = None,
                           host: str | None = "127.0.0.1", api_key: str | None = None,
                           scheduling_strategy=None):
    """A supervised simulated-engine actor (no model: a threaded HTTP server process);
    ``host=None``: it listens on its node's address, like the other engines on a cluster."""
    from edv_ray.simulation.server import SimulatedServer

    return _cpu_server_actor(SimulatedServer, dict(server_id=server_id, model_name=model_name,
                                                   served_name=model_name, profile=profile,
                                                   benchmarks=benchmarks, log_dir=log_dir,
                                                   host=host, api_key=api_key),
                             scheduling_strategy)


def launch_servers(cfg: RunConfig, run_dir: Path, shared: bool = False,
                   echo=None) -> ServedPool:
    """Start every server the run needs (in parallel) and wait until all answer.
    ``shared``: one set of replicas per model for every role group (a sweep's pool,
    used by many runs). GPU replicas are reserved first, a placement group per model
    (see serving.placement). Every engine requires one key made here for this pool."""
    import ray

    from edv_ray.serving.placement import reserve

    pool = ServedPool()
    api_key = secrets.token_urlsafe(32)  # this run's (or sweep's) engines' key
    pending = []
    gpus = {m: replica_gpus(m, cfg.models[m]) for m in role_groups(cfg)}
    demand = {m: (g, cfg.models[m].replicas) for m, g in gpus.items() if g > 0}
    placed = reserve(demand, echo=echo) if demand else {}
    pool.groups = [g for g, _ in placed.values()]
    cpu_nodes: list[str] = []  # the nodes of the engines that hold no GPU, spread
    try:
        for model, groups in sorted(role_groups(cfg).items()):
            mc = cfg.models[model]
            if mc.engine == "endpoint":
                pool.external[model] = Endpoint(model, mc.litellm_model or "", mc.api_base,
                                                mc.api_key_env)
                continue
            pool.served[model] = served_name(model, mc)
            # vLLM batches requests and shares its prefix cache (the simulated engine has no
            # cache): one set of replicas per model
            for group in (["*"] if mc.engine in ("vllm", "simulated") or shared else sorted(groups)):
                for i in range(mc.replicas):
                    where = (placed[model][1][i] if model in placed
                             else cpu_engine_strategy(cpu_nodes))
                    actor = _server_actor(cfg, model, group, i, run_dir, where, api_key)
                    pool.actors.append(actor)
                    pending.append((model, group, actor.start.remote()))
        infos: dict[tuple[str, str], list[ServerInfo]] = {}
        for (model, group, ref), actor in zip(pending, pool.actors):
            info: ServerInfo = ray.get(ref)
            pool.infos.append(info)
            pool.actor_by_url[info.base_url] = actor
            set_served_key(info.base_url, api_key)
            pool.keyed.append(info.base_url)
            infos.setdefault((model, group), []).append(info)
        pool.pickers = {key: StickyReplicaPicker.from_infos(v) for key, v in infos.items()}
    except Exception:
        pool.stop()
        raise
    return pool
