"""Helpers shared by the tests and the gold-replay experiment script."""

from __future__ import annotations


def tau2_tasks(domain: str, split: str | None = None) -> list:
    """τ²-bench tasks of one domain (every split by default), through the protocol."""
    from edv_ray.config_benchmarks import Tau2Benchmark
    from edv_ray.envs.protocol import get_env

    return get_env("tau2").select_tasks(Tau2Benchmark(domains=[domain]), split or "all",
                                        None, None)[domain]


def scripted_config(base_url: str, tmp_path, **overrides) -> dict:
    """A run config whose every model is the scripted endpoint."""
    cfg = {
        "run_id": "t",
        "output_dir": str(tmp_path / "runs"),
        "models": {"scripted": {"engine": "endpoint", "litellm_model": "openai/scripted",
                                "api_base": base_url}},
        "agents": [{"name": "native", "model": "scripted", "prompt_strategy": "native_tools"},
                   {"name": "text", "model": "scripted", "prompt_strategy": "text_tools"}],
        "roles": {"user_simulator": {"model": "scripted"}},
        "benchmark": {"domains": ["airline"], "split": "test", "num_tasks": 2},
        "runtime": {"concurrency": 4, "episode_timeout_s": 60},
        "llm": {"timeout_s": 10, "max_retries": 1},
        "wandb": {"mode": "disabled"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg
