"""Hostile Mind2Web data folders: each is refused by `edv validate` (and `edv run`) with
exit 2 and one line naming the file and the record / line / key, runs nothing from the
data, makes no run folder and leaves the data files as they were."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from edv_ray.cli import main
from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mind2web.scores import load_scores
from edv_ray.testing.helpers import scripted_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"
SPLIT = "test_website"


class RunsCode:
    """Unpickling this runs ``touch MARKER`` (what a crafted scores file does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class CallsEval:
    def __reduce__(self):
        return eval, ("1 + 1",)


def _records() -> list[dict]:
    return json.loads((FIX / SPLIT / f"{SPLIT}_0.json").read_text())


def _scores() -> dict:
    with (FIX / "scores_all_data.pkl").open("rb") as fh:
        return pickle.load(fh)


def _set(rec: dict, path: str, value) -> dict:
    node = rec
    *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    for p in head:
        node = node[p]
    node[last] = value
    return rec


def _dup_file(folder: Path) -> None:
    shutil.copy(folder / SPLIT / f"{SPLIT}_0.json", folder / SPLIT / f"{SPLIT}_1.json")


def _records_file(content) -> callable:
    def write(folder: Path) -> None:
        path = folder / SPLIT / f"{SPLIT}_0.json"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(json.dumps(content))
    return write


def _scores_file(obj=None, raw: bytes | None = None) -> callable:
    def write(folder: Path) -> None:
        (folder / "scores_all_data.pkl").write_bytes(raw if raw is not None else pickle.dumps(obj))
    return write


def _bad_rank(value) -> callable:
    data = _scores()
    sid = next(iter(data["ranks"]))
    cid = next(iter(data["ranks"][sid]))
    data["ranks"][sid][cid] = value
    return _scores_file(data)


rec = _records()
CASES = {  # name: (how the folder is spoiled, what the one line must say)
    "pickle_eval": (_scores_file(CallsEval()), "refused: it asks to load builtins.eval"),
    "pickle_not_a_dict": (_scores_file([1, 2, 3]), "must be a dict with keys"),
    "pickle_truncated": (_scores_file(raw=pickle.dumps(_scores())[:40]), "not a readable pickle"),
    "rank_is_text": (_bad_rank("3"), "is '3' (str), expected an integer rank"),
    "rank_is_float": (_bad_rank(1.5), "expected an integer rank"),
    "score_is_text": (_scores_file({"ranks": {}, "scores": {"s": {"1": "high"}}}),
                      "scores['s']['1'] is 'high' (str), expected a number"),
    "not_utf8": (_records_file(json.dumps(rec, indent=1).replace("baggage", "bagg\udce9ge")
                               .encode("utf-8", "surrogateescape")), "line 7: not UTF-8 (byte 0xe9)"),
    "not_json": (_records_file(b'[\n {"annotation_id": \n'), "line 3 column 1: not valid JSON"),
    "not_an_array": (_records_file({"tasks": rec}), "must hold a JSON array"),
    "record_not_object": (_records_file([7]), "record 0: a task record must be a JSON object"),
    "node_id_is_int": (_records_file([_set(_records()[0], "actions.0.pos_candidates.0."
                                           "backend_node_id", 17)]),
                       ("actions.0.pos_candidates.0.backend_node_id: Input should be a valid "
                        "string (got int)")),
    "actions_is_text": (_records_file([_set(_records()[0], "actions", "click it")]),
                        "actions: Input should be a valid list (got str)"),
    "no_actions": (_records_file([_set(_records()[0], "actions", [])]),
                   "actions: List should have at least 1 item"),
    "task_id_is_int": (_records_file([_set(_records()[0], "annotation_id", 5)]),
                       "record 0: annotation_id: Input should be a valid string (got int)"),
    "operation_is_text": (_records_file([_set(_records()[0], "actions.0.operation", "CLICK")]),
                          "actions.0.operation: Input should be a valid dictionary"),
    "reprs_count": (_records_file([_set(_records()[0], "action_reprs", [])]),
                    "0 action_reprs for 1 actions"),
    "duplicate_task_id": (_dup_file, "annotation_id 'tw-1' appears twice in split test_website"),
    "duplicate_action_uid": (_records_file([_set(_records()[0], "actions", _records()[0]
                                                 ["actions"] * 2)
                                            | {"action_reprs": rec[0]["action_reprs"] * 2}]),
                             "appears twice in one task"),
}


def _folder(tmp_path: Path, spoil) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(FIX, folder, ignore=shutil.ignore_patterns("official"))
    spoil(folder)
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _config(tmp_path: Path, folder: Path) -> str:
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path, agents=[
        {"name": "a", "model": "scripted", "prompt_strategy": "text_tools"}],
        roles={"user_simulator": None})
    cfg["benchmark"] = {"name": "mind2web", "data_dir": str(folder), "split": SPLIT}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _refused(capsys, tmp_path, folder, verb: str, expect: str) -> None:
    before = _snapshot(folder)
    assert main([verb, _config(tmp_path, folder)]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert expect in lines[0] and str(folder) in lines[0], lines[0]
    assert _snapshot(folder) == before  # nothing lost or changed
    assert not (tmp_path / "runs").exists()  # no run folder


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_data_is_one_line_exit_2(name, tmp_path, capsys):
    spoil, expect = CASES[name]
    _refused(capsys, tmp_path, _folder(tmp_path, spoil), "validate", expect)


@pytest.mark.parametrize("verb", ["validate", "run"])
def test_a_crafted_pickle_runs_nothing(verb, tmp_path, capsys):
    marker = tmp_path / "pwned"
    folder = _folder(tmp_path, _scores_file(RunsCode(marker)))
    _refused(capsys, tmp_path, folder, verb, "refused: it asks to load posix.system")
    assert not marker.exists()


def test_the_release_formats_still_load(tmp_path):
    """What the ranker writes (defaultdicts, NumPy numbers) passes the restricted reader."""
    data = _scores()
    ranks, scores = defaultdict(dict), defaultdict(dict)
    for sid, per in data["ranks"].items():
        ranks[sid] = {c: np.int64(r) for c, r in per.items()}
        scores[sid] = {c: np.float32(v) for c, v in data["scores"][sid].items()}
    path = tmp_path / "scores_all_data.pkl"
    path.write_bytes(pickle.dumps({"scores": scores, "ranks": ranks}, protocol=2))
    got = load_scores(path)
    assert got.ranks == data["ranks"]
    assert got.scores["tw-1_a1"] == pytest.approx(data["scores"]["tw-1_a1"])
    with pytest.raises(BenchmarkDataError, match="posix.system"):
        (tmp_path / "x.pkl").write_bytes(pickle.dumps(RunsCode(tmp_path / "m")))
        load_scores(tmp_path / "x.pkl")
    assert not (tmp_path / "m").exists()
