"""The planted worlds' configs: every world and size loads, its test trials are what the
size says, and its construction runs one rollout per executor and task — what the
expectations model; a world asking for more is refused."""

from __future__ import annotations

import pytest
import yaml

from edv_ray.config import ConfigError
from edv_ray.validation.worlds import SIZES, WORLDS_DIR, load_world

WORLDS = sorted(p.stem for p in WORLDS_DIR.glob("*.yaml") if p.stem != "base")


@pytest.mark.parametrize("name", WORLDS)
def test_every_world_builds_memory_from_one_rollout(name, tmp_path):
    for size in SIZES:
        w = load_world(name, size, tmp_path)
        rt = w.run_config().runtime
        assert rt.construction_rollouts == 1
        assert rt.trials == w.design().trials == w.meta["sizes"][size].get("trials", 1)


def test_a_world_whose_construction_repeats_is_refused(tmp_path):
    for f in ("base.yaml", "main.yaml"):
        (tmp_path / f).write_text((WORLDS_DIR / f).read_text())
    raw = yaml.safe_load((tmp_path / "main.yaml").read_text())
    raw["runtime"] = {"construction_trials": None}  # construction then runs `trials` rollouts
    raw["validation"]["sizes"]["full"]["trials"] = 3
    (tmp_path / "main.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="construction runs 3 rollouts"):
        load_world("main", "full", worlds_dir=tmp_path)
    load_world("main", "fast", worlds_dir=tmp_path)  # one trial: one rollout either way
