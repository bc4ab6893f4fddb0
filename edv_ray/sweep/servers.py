"""The servers of a sweep: one set per distinct model setting, shared by every variant.

A model is its whole setting (engine, weights or endpoint, context size, engine
arguments, replicas, ...), not its name: two variants whose ``qwen`` differs (say
``n_ctx``) need two servers. The first setting of a name keeps the name; each further
setting gets ``NAME-2``, ``NAME-3``, ... (never a name some variant already uses). Each
variant then sees the shared pool under its own model names (:func:`variant_pool`), so
its run folder, tables and config say ``qwen`` while its calls reach its own servers.
"""

from __future__ import annotations

import json
from dataclasses import replace

from edv_ray.config import ConfigError, ModelConfig, RunConfig, load_config_dict
from edv_ray.runtime.servers import ServedPool

PROCESS_WIDE = ("ray_address", "num_cpus")  # runtime settings one process has only once


def used_models(cfg: RunConfig) -> set[str]:
    """The models the run's agents and user simulator call (the ones it serves)."""
    used = {a.model for a in cfg.agents}
    if cfg.roles.user_simulator is not None:
        used.add(cfg.roles.user_simulator.model)
    return used


def plan_servers(configs: dict[str, RunConfig]) -> tuple[dict[str, ModelConfig],
                                                          dict[str, dict[str, str]]]:
    """(server name → model setting, run_id → {the variant's model name → server name})."""
    taken = {m for cfg in configs.values() for m in cfg.models}
    servers: dict[str, ModelConfig] = {}
    by_setting: dict[tuple[str, str], str] = {}
    names: dict[str, dict[str, str]] = {}
    for run_id, cfg in configs.items():
        names[run_id] = {}
        for model in sorted(used_models(cfg)):
            mc = cfg.models[model]
            key = (model, json.dumps(mc.model_dump(mode="json"), sort_keys=True))
            if key not in by_setting:
                server = model
                k = 2
                while server in servers or (server != model and server in taken):
                    server, k = f"{model}-{k}", k + 1
                by_setting[key], servers[server] = server, mc
            names[run_id][model] = by_setting[key]
    return servers, names


def union_config(servers: dict[str, ModelConfig], configs: dict[str, RunConfig]) -> RunConfig:
    """A config holding every server of the sweep (for ``launch_servers``): one agent per
    server; Ray is started with the variants' common process-wide runtime settings."""
    first = next(iter(configs.values()))
    for key in PROCESS_WIDE:
        values = {repr(getattr(c.runtime, key)) for c in configs.values()}
        if len(values) > 1:
            raise ConfigError(f"runtime.{key} differs between variants ({', '.join(sorted(values))}); "
                              "one sweep runs in one Ray: set it in the base config")
    agents = [{"name": f"server{i}", "model": name} for i, name in enumerate(servers)]
    return load_config_dict({"run_id": "sweep", "agents": agents,
                             "models": {k: v.model_dump() for k, v in servers.items()},
                             "runtime": first.runtime.model_dump(), "wandb": {"mode": "disabled"}},
                            "<sweep servers>")


def variant_pool(shared: ServedPool, names: dict[str, str]) -> ServedPool:
    """The sweep's pool as one variant sees it: its model names → its settings' servers.
    Stopping it stops nothing (the sweep stops the shared pool)."""
    servers = set(names.values())
    return ServedPool(
        pickers={(model, group): picker for model, server in names.items()
                 for (srv, group), picker in shared.pickers.items() if srv == server},
        external={model: replace(shared.external[server], model_name=model)
                  for model, server in names.items() if server in shared.external},
        served={model: shared.served[server] for model, server in names.items()
                if server in shared.served},
        infos=[i for i in shared.infos if i.model_name in servers],
        actors=[], actor_by_url=shared.actor_by_url)
