"""Every shipped paper config (and each paper sweep's variants) passes the up-front
prompt budget check of ``pipeline.validate`` on airline, retail and telecom with each
model's real context (catalog ``max_model_len`` for vLLM, the stated ``n_ctx`` of an
endpoint) — model reachability is not part of it. The embedded default run, on its
llama.cpp context of 4096, passes too."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.config import RunConfig, load_config
from edv_ray.envs.protocol import get_env
from edv_ray.pipeline import check_prompt_budgets, default_config
from edv_ray.serving.context import model_context
from edv_ray.sweep import load_sweep

ROOT = Path(__file__).parents[1]
PAPER = sorted({*ROOT.joinpath("experiments").rglob("*paper*.yaml"),
                *ROOT.joinpath("cluster", "configs").glob("*.yaml")})


def _configs(path: Path) -> list[RunConfig]:
    if path.parent.name == "sweeps":
        return [v.config for v in load_sweep(path)[1]]
    return [load_config(path)]


def test_the_paper_configs_are_all_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAPER}
    assert {"experiments/edv_tau2_paper.yaml", "experiments/main_table/paper.yaml",
            "cluster/configs/paper-pool.yaml"} <= names and len(names) >= 9


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_paper_config_fits_every_tau2_domain(path):
    env = get_env("tau2")
    for cfg in _configs(path):
        for name, mc in cfg.models.items():
            assert model_context(name, mc) >= 40960, (path, name)  # the real context
        check_prompt_budgets(cfg, env, ["airline", "retail", "telecom"])


def test_the_embedded_default_run_fits():
    cfg = default_config()
    assert {model_context(n, mc) for n, mc in cfg.models.items()} == {4096}
    check_prompt_budgets(cfg, get_env(cfg.benchmark.name), cfg.benchmark.domains)
