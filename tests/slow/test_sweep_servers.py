"""The smallest shipped sweep (experiments/sweeps/smoke_embedded.yaml: 4 variants over 2
self-served models) starts each model server once, runs every variant on those servers,
and `edv compare` reads it (real llama.cpp servers; slow, CI runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from edv_ray.cli import main
from edv_ray.results.views import connect

pytestmark = pytest.mark.slow
SMOKE = Path(__file__).parents[2] / "experiments" / "sweeps" / "smoke_embedded.yaml"


def test_smoke_sweep_starts_each_model_once_and_compares(tmp_path, ray_session):
    sweep = yaml.safe_load(SMOKE.read_text())
    sweep["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["sweep", "--no-progress", str(path)]) == 0
    folder = tmp_path / "out" / sweep["sweep_id"]
    started = json.loads((folder / "servers.json").read_text())
    assert sorted(s["model_name"] for s in started) == ["smol_a", "smol_b"]  # 2 starts, not 4
    assert len(list((folder / "logs").glob("*.log"))) == 2
    urls = {s["model_name"]: s["base_url"] for s in started}
    runs = sorted((folder / "runs").iterdir())
    assert len(runs) == 4
    for run in runs:
        model = yaml.safe_load((run / "config.yaml").read_text())["agents"][0]["model"]
        used = {s["base_url"] for s in json.loads((run / "servers.json").read_text())}
        assert used == {urls[model]}  # each variant was served by its model's sweep server
        assert connect(run).execute("SELECT count(*), bool_and(status = 'ok') "
                                    "FROM episodes").fetchone() == (1, True)
    assert main(["compare", str(folder), "--boot", "200"]) == 0
    md = (folder / "compare" / "compare.md").read_text()
    assert "no_memory" in md and "on_a" in md and "on_b" in md
