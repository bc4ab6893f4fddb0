"""Each model's real context window: llama.cpp's n_ctx, vLLM's max_model_len (catalog or
stated), an endpoint's reported context (vLLM's /v1/models, llama.cpp's /props, read
from the scripted server over HTTP) or a required n_ctx — and the prompt budget check
of ``pipeline.validate`` uses it."""

from __future__ import annotations

import pytest

from edv_ray import pipeline
from edv_ray.config import ConfigError, ModelConfig, load_config_dict
from edv_ray.serving.catalog import vllm_argv
from edv_ray.serving.context import model_context, resolve_contexts
from edv_ray.testing.helpers import scripted_config


def test_served_engines_know_their_context():
    assert model_context("q", ModelConfig(engine="llama_cpp", weights="w")) == 8192
    assert model_context("q", ModelConfig(engine="llama_cpp", weights="w", n_ctx=4096)) == 4096
    assert model_context("m", ModelConfig(engine="vllm", weights="mimo-v2-flash")) == 65536
    assert model_context("q", ModelConfig(engine="vllm", weights="qwen3-8b")) == 40960
    stated = ModelConfig(engine="vllm", weights="glm-4.7-fp8", n_ctx=131072)
    assert model_context("g", stated) == 131072  # and vLLM is started with it:
    argv = vllm_argv(stated.weights, "g", 8000, overrides=stated.engine_args)
    assert argv[argv.index("--max-model-len") + 1] == "131072"
    by_args = ModelConfig(engine="vllm", weights="glm-4.7-fp8", engine_args={"max-model-len": 32768})
    assert model_context("g", by_args) == 32768
    with pytest.raises(ValueError, match="differ"):
        ModelConfig(engine="vllm", weights="x", n_ctx=4096, engine_args={"max_model_len": 8192})
    with pytest.raises(ConfigError, match="not in the vLLM catalog.*set n_ctx"):
        model_context("x", ModelConfig(engine="vllm", weights="someone/unknown-model"))
    with pytest.raises(ConfigError, match="'h'.*set n_ctx"):
        model_context("h", ModelConfig(engine="endpoint", litellm_model="anthropic/claude"))


def _cfg(server, tmp_path, **model):
    cfg = scripted_config(server.base_url, tmp_path)
    cfg["models"]["scripted"].update(model)
    return load_config_dict(cfg)


def test_endpoint_context_comes_from_the_server(server, tmp_path):
    server.max_model_len = 65536  # as vLLM lists it in /v1/models
    cfg = _cfg(server, tmp_path)
    assert cfg.models["scripted"].n_ctx is None
    resolve_contexts(cfg)
    assert cfg.models["scripted"].n_ctx == 65536
    server.max_model_len, server.props_n_ctx = None, 16384  # llama.cpp's /props
    cfg = _cfg(server, tmp_path)
    resolve_contexts(cfg)
    assert cfg.models["scripted"].n_ctx == 16384
    server.props_n_ctx = None  # reports nothing (llama-cpp-python's server): n_ctx needed
    with pytest.raises(ConfigError, match="reports no context size: set n_ctx"):
        resolve_contexts(_cfg(server, tmp_path))
    cfg = _cfg(server, tmp_path, n_ctx=12000)
    resolve_contexts(cfg)
    assert cfg.models["scripted"].n_ctx == 12000
    server.max_model_len = 8192  # a stated context above what the server serves
    with pytest.raises(ConfigError, match="n_ctx 12000 but the server .* 8192"):
        resolve_contexts(_cfg(server, tmp_path, n_ctx=12000))


def test_validate_budgets_against_the_reported_context(server, tmp_path):
    cfg = scripted_config(server.base_url, tmp_path)
    for a in cfg["agents"]:
        a["sampling"] = {"max_tokens": 4096}
    server.max_model_len = 4096  # the airline policy + 4096 answer tokens cannot fit
    with pytest.raises(ConfigError, match="airline policy .* > n_ctx 4096"):
        pipeline.validate(load_config_dict(cfg))
    server.max_model_len = 32768
    resolved = load_config_dict(cfg)
    pipeline.validate(resolved)
    assert resolved.models["scripted"].n_ctx == 32768  # recorded in the run's config
