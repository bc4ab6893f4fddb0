"""Every run config under cluster/configs/ passes `edv validate` — the checks a run makes
before any GPU is used (schema, names, tasks, user simulator, prompt budgets against each
model's context; not endpoint reachability: the cluster's servers do not exist here). A
config that fails here would fail a RayJob (backoffLimit 0), the launcher or SLURM at
start, after the GPUs were allocated."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.cli import main

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "cluster" / "configs").glob("*.yaml"))


def test_there_are_configs():
    assert [p.name for p in CONFIGS] == ["paper-pool.yaml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_edv_validate_accepts_it(path, capsys):
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "config OK" in out.out


def test_a_cluster_run_needs_an_absolute_run_folder(tmp_path):
    """Workers on other nodes write into the run folder: a relative one would land in
    each node's own working directory."""
    from edv_ray import pipeline
    from edv_ray.config import ConfigError, load_config_dict
    from edv_ray.testing.helpers import scripted_config

    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path, output_dir="runs",
                          runtime={"ray_address": "auto"})
    with pytest.raises(ConfigError, match="is relative"):
        pipeline.validate(load_config_dict(cfg))
