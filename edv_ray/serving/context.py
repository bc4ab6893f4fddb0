"""Each model's real context window, for prompt budgets.

* llama_cpp: the ``n_ctx`` the server is started with (``ModelConfig`` default 8192);
* vllm: ``n_ctx`` (served as ``max_model_len``), else the run's
  ``engine_args.max_model_len``, else the catalog's ``max_model_len``;
* endpoint: ``n_ctx`` when set, else what the server reports — vLLM (and SGLang) list
  ``max_model_len`` per model in ``/v1/models``; llama.cpp's ``llama-server`` reports the
  slot context in ``/props`` (``default_generation_settings.n_ctx``, at the server's
  root); llama-cpp-python's server reports none (measured with 0.3.36: ``/v1/models``
  holds id / object / owned_by / permissions only, ``/props`` is a 404). With neither,
  validation fails with one line asking for ``n_ctx``.

:func:`resolve_contexts` runs in ``pipeline.validate``: it writes the reported context
into the run's config (so the run folder's ``config.yaml`` records the context used)
and fails when a stated ``n_ctx`` is larger than what the server serves.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from edv_ray.config import ConfigError, ModelConfig, RunConfig
from edv_ray.serving.catalog import find_entry

PROBE_TIMEOUT_S = 5.0


def _norm(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_")


def model_context(name: str, mc: ModelConfig) -> int:
    """The context window (tokens) ``mc`` is served with; a clear error when unknown."""
    if mc.n_ctx is not None:
        return mc.n_ctx
    if mc.engine == "vllm":
        served = {_norm(k): v for k, v in mc.engine_args.items()}.get("max_model_len")
        if served is not None:
            return int(served)
        entry = find_entry(mc.weights or "")
        if entry is not None:
            return entry.max_model_len
        raise ConfigError(f"model {name!r}: {mc.weights!r} is not in the vLLM catalog, so its "
                          "context is unknown: set n_ctx (served as --max-model-len)")
    raise ConfigError(f"model {name!r}: the endpoint reports no context size: set n_ctx to "
                      "the context (tokens) its server serves")


def _get_json(url: str, headers: dict[str, str]) -> Any:
    try:
        resp = httpx.get(url, headers=headers, timeout=PROBE_TIMEOUT_S)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def listed_context(listing: Any, model_id: str) -> int | None:
    """``max_model_len`` of ``model_id`` in an OpenAI ``/v1/models`` listing (vLLM's
    field; the only entry when the id does not match any)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list) or not data:
        return None
    entries = [d for d in data if isinstance(d, dict)]
    chosen = next((d for d in entries if d.get("id") == model_id), None)
    if chosen is None and len(entries) == 1:
        chosen = entries[0]
    value = (chosen or {}).get("max_model_len")
    return int(value) if isinstance(value, int) and value > 0 else None


def props_context(props: Any) -> int | None:
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx`` (one slot's context)."""
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    value = settings.get("n_ctx") if isinstance(settings, dict) else None
    return int(value) if isinstance(value, int) and value > 0 else None


def reported_context(mc: ModelConfig) -> int | None:
    """The context an endpoint's server reports, or None (no such field, or no answer:
    reachability itself is checked by ``runtime.servers.check_models``)."""
    base = (mc.api_base or "").rstrip("/")
    headers = {}
    if mc.api_key_env and os.environ.get(mc.api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[mc.api_key_env]}"
    model_id = (mc.litellm_model or "").split("/", 1)[-1]
    got = listed_context(_get_json(base + "/models", headers), model_id)
    if got is None:
        root = base.removesuffix("/v1")
        got = props_context(_get_json(root + "/props", headers))
    return got


def resolve_contexts(cfg: RunConfig) -> None:
    """Fill each endpoint model's ``n_ctx`` from its server (in ``cfg``, in place) and
    check every model's context is known. A stated ``n_ctx`` above what the server
    reports is an error (prompts would be refused); below it is kept (the user's choice)."""
    for name, mc in list(cfg.models.items()):
        if mc.engine == "endpoint" and mc.api_base:
            served = reported_context(mc)
            if served is not None and mc.n_ctx is not None and mc.n_ctx > served:
                raise ConfigError(f"model {name!r}: n_ctx {mc.n_ctx} but the server at "
                                  f"{mc.api_base} serves a context of {served} tokens")
            if served is not None and mc.n_ctx is None:
                cfg.models[name] = mc.model_copy(update={"n_ctx": served})
        model_context(name, cfg.models[name])
