"""Start the servers a run needs and hand out endpoints.

Each (model, role group) gets its own ``replicas`` llama.cpp servers: agents and the
user simulator alternate within an episode, and a llama.cpp server keeps one prefix
cache, so sharing one server re-evaluates the whole prompt at every turn. An episode
sticks to one replica of each group (hash of its id). External endpoints are checked
for reachability before any episode starts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from edv_ray.config import ConfigError, ModelConfig, RunConfig
from edv_ray.llm.client import Endpoint
from edv_ray.serving.embedded import EMBEDDED_MODELS, resolve_weights
from edv_ray.serving.protocol import ServerInfo


def served_name(model_name: str, mc: ModelConfig) -> str:
    emb = EMBEDDED_MODELS.get(mc.weights or "")
    return emb.served_name if emb else model_name


def role_groups(cfg: RunConfig) -> dict[str, set[str]]:
    """model name → the role groups that use it ("agent", "user")."""
    groups: dict[str, set[str]] = {}
    for a in cfg.agents:
        groups.setdefault(a.model, set()).add("agent")
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
            if mc.api_key_env and mc.api_key_env not in __import__("os").environ:
                raise ConfigError(f"model {name!r}: environment variable {mc.api_key_env} is not set")
            if mc.api_base:
                try:
                    httpx.get(mc.api_base.rstrip("/") + "/models", timeout=5.0)
                except httpx.HTTPError as err:
                    raise ConfigError(
                        f"model {name!r}: endpoint {mc.api_base} is unreachable ({type(err).__name__})"
                    ) from None


@dataclass
class ServedPool:
    endpoints: dict[tuple[str, str], list[Endpoint]] = field(default_factory=dict)
    infos: list[ServerInfo] = field(default_factory=list)
    actors: list = field(default_factory=list)

    def endpoint(self, model: str, group: str, sticky_key: str) -> Endpoint:
        eps = self.endpoints.get((model, group)) or self.endpoints.get((model, "*"))
        if not eps:
            raise KeyError(f"no endpoint for model {model!r} (group {group})")
        h = int(hashlib.sha1(sticky_key.encode()).hexdigest()[:8], 16)
        return eps[h % len(eps)]

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.stop.remote(), timeout=30)
                ray.kill(actor)
            except Exception:
                pass
        self.actors.clear()


def launch_servers(cfg: RunConfig, run_dir: Path) -> ServedPool:
    import ray

    from edv_ray.runtime.actors import ServerActor

    pool = ServedPool()
    pending = []
    for model, groups in sorted(role_groups(cfg).items()):
        mc = cfg.models[model]
        if mc.engine == "endpoint":
            pool.endpoints[(model, "*")] = [Endpoint(model, mc.litellm_model or "", mc.api_base,
                                                     mc.api_key_env)]
            continue
        if mc.engine != "llama_cpp":
            raise ConfigError(f"model {model!r}: engine {mc.engine} is started by the cluster "
                              "path (see cluster/README.md), not by a local run")
        for group in sorted(groups):
            for i in range(mc.replicas):
                sid = f"{model}/{group}/{i}"
                actor = ServerActor.options(name=None).remote(sid, model, "llama_cpp", dict(
                    weights=mc.weights, served_name=served_name(model, mc), n_ctx=mc.n_ctx,
                    n_threads=mc.n_threads, engine_args=mc.engine_args,
                    log_dir=str(run_dir / "logs")))
                pool.actors.append(actor)
                pending.append((model, group, actor.start.remote()))
    try:
        for model, group, ref in pending:
            info: ServerInfo = ray.get(ref)
            pool.infos.append(info)
            pool.endpoints.setdefault((model, group), []).append(
                Endpoint(model, f"openai/{info.served_name}", info.base_url))
    except Exception:
        pool.stop()
        raise
    return pool
