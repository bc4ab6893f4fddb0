"""Task selection says what it does (issue 22 item 11): `task_ids` with a smaller
`num_tasks` takes the first N listed tasks (none is reported "not found"); `task_ids: []`
is refused (it used to select the whole split); a listed id that exists nowhere, or
twice, is one line. On all three benchmarks, through `edv validate` (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edv_ray.cli import main
from edv_ray.config import load_config_dict
from edv_ray.pipeline import selected_tasks
from edv_ray.testing.helpers import scripted_config
from tests.hostile.security_kit import one_line, write_yaml

FIX = Path(__file__).parents[1] / "fixtures"
BENCH = {
    "tau2": ({"domains": ["mock"], "split": "all", "solo": "always"},
             ["create_task_1", "update_task_1", "impossible_task_1"]),
    "mind2web": ({"name": "mind2web", "data_dir": str(FIX / "mind2web"), "split": "test_task"},
                 ["tt-1", "tt-2", "tt-3"]),
    "mmtb": ({"name": "mmtb", "data_dir": str(FIX / "mmtb"), "split": "all"}, ["mmtb-1", "mmtb-2"]),
}


def _cfg(tmp_path, bench: str, **sel) -> dict:
    section, _ids = BENCH[bench]
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path, method="no_memory",
                          agents=[{"name": "a", "model": "scripted"}])
    cfg["benchmark"] = {**section, "num_tasks": None, **sel}
    cfg["roles"] = {}
    return cfg


@pytest.mark.parametrize("bench", sorted(BENCH))
def test_task_ids_with_a_smaller_num_tasks_takes_the_first_listed(tmp_path, bench):
    ids = BENCH[bench][1]
    got = selected_tasks(load_config_dict(_cfg(tmp_path, bench, task_ids=ids, num_tasks=1)))
    chosen = [getattr(t, "id", None) or getattr(t, "annotation_id") for ts in got.values() for t in ts]
    assert len(chosen) == 1 and chosen[0] in ids


@pytest.mark.parametrize("bench", sorted(BENCH))
@pytest.mark.parametrize("sel,phrase", [
    ({"task_ids": []}, "benchmark.task_ids: is empty"),
    ({"train_task_ids": []}, "benchmark.train_task_ids: is empty"),
    ({"task_ids": ["nope-1"]}, "nope-1"),
    ({"task_ids": ["x", "x"]}, "more than once"),
])
def test_bad_selection_is_one_line(tmp_path, capsys, bench, sel, phrase):
    path = write_yaml(tmp_path / "cfg.yaml", _cfg(tmp_path, bench, **sel))
    assert main(["validate", path]) == 2
    assert phrase in one_line(capsys.readouterr().err)
