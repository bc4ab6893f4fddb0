"""`edv sweep`: the grid expands into run folders with their axes, variants run (in
parallel) on one shared pool, re-running resumes, and `edv compare` reads the sweep."""

from __future__ import annotations

import json

import yaml

from edv_ray.cli import main
from edv_ray.results.views import connect
from edv_ray.sweep import load_sweep
from edv_ray.testing.helpers import scripted_config


def write_sweep(tmp_path, base: dict, axes: dict, parallel: int = 2) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"sweep_id": "sw", "output_dir": str(tmp_path / "out"),
                                    "base": base, "parallel": parallel, "axes": axes}))
    return str(path)


def test_sweep_runs_resumes_and_compares(server, tmp_path, capsys):
    server.agent_modes["bad"] = "nothing"
    base = scripted_config(server.base_url, tmp_path, agents=[
        {"name": "good", "model": "scripted", "prompt_strategy": "native_tools"},
        {"name": "bad", "model": "scripted", "prompt_strategy": "native_tools"}],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": 2, "solo": "always"})
    axes = {"pool": {"good_only": {"agents": [base["agents"][0]]},
                     "both": {"agents": base["agents"]}},
            "seed": [0, 1]}
    path = write_sweep(tmp_path, base, axes)
    _sweep, variants = load_sweep(path)
    assert sorted(rid for rid, _c, _a in variants) == [
        "sw-both-0", "sw-both-1", "sw-good_only-0", "sw-good_only-1"]
    assert main(["sweep", "--no-progress", path]) == 0
    runs = tmp_path / "out" / "sw" / "runs"
    for rid, cfg, axes_of in variants:
        assert json.loads((runs / rid / "axes.json").read_text()) == {"_sweep_id": "sw", **axes_of}
        n = connect(runs / rid).execute("SELECT count(*) FROM episodes").fetchone()[0]
        assert n == 2 * len(cfg.agents)
    calls = len(server.requests)
    assert main(["sweep", "--no-progress", path]) == 0  # resume: nothing left to run
    assert len(server.requests) == calls
    assert main(["compare", str(tmp_path / "out" / "sw"), "--boot", "100"]) == 0
    md = (tmp_path / "out" / "sw" / "compare" / "compare.md").read_text()
    assert "pool" in md and "good_only" in md
    assert (tmp_path / "out" / "sw" / "compare" / "heterogeneity_pool.png").is_file()
