"""Mind2Web metrics and data reading, against hand-computed values."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from edv_ray.envs.errors import BenchmarkDataError
from edv_ray.envs.mind2web.data import SPLITS, Mind2WebData, load_scores, load_split
from edv_ray.envs.mind2web.metrics import (
    StepScore,
    TaskScore,
    action_f1,
    action_string,
    aggregate,
    score_step,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = FIXTURES / "mind2web"


def test_action_f1_hand_values():
    assert action_f1("CLICK", "CLICK") == 1.0
    assert action_f1("", "") == 1.0
    assert action_f1("", "CLICK") == 0.0
    assert action_f1("TYPE New York", "") == 0.0
    # TYPE with a partial value: p={TYPE,New,York}, g={TYPE,New,York,City}: P=1, R=3/4
    assert action_f1("TYPE New York", "TYPE New York City") == pytest.approx(6 / 7)
    # case-sensitive tokens: only TYPE matches, P = R = 1/4
    assert action_f1("TYPE new york city", "TYPE New York City") == pytest.approx(0.25)
    # sets, not bags: the repeated token counts once
    assert action_f1("SELECT 2 2 adults", "SELECT 2 adults") == 1.0
    assert action_f1("CLICK", "TYPE Paris") == 0.0
    assert action_string("CLICK", "") == "CLICK"
    assert action_string("TYPE", " New York ") == "TYPE New York"


def test_score_step_rules():
    ok = score_step(["7"], 3, "7", "TYPE New York City", "TYPE New York City")
    assert (ok.element_correct, ok.action_f1, ok.step_success) == (1.0, 1.0, 1.0)
    partial = score_step(["7"], 3, "7", "TYPE New York", "TYPE New York City")
    assert partial.element_correct == 1.0 and partial.step_success == 0.0
    assert partial.action_f1 == pytest.approx(6 / 7)
    wrong_el = score_step(["7"], 3, "8", "CLICK", "CLICK")
    assert (wrong_el.element_correct, wrong_el.action_f1, wrong_el.step_success) == (0, 1, 0)
    # gold outside top-k (no positive kept): all zero even with a perfect action
    out = score_step([], 5, "8", "CLICK", "CLICK")
    assert (out.element_correct, out.action_f1, out.step_success, out.reason) == \
        (0, 0, 0, "no_positive_in_top_k")
    assert score_step(["7"], 1, "7", "CLICK", "CLICK").reason == "single_candidate"
    none = score_step(["7"], 4, None, None, "CLICK")
    assert (none.action_f1, none.reason) == (0.0, "no_prediction")


def test_aggregate_micro_macro_upper_bound():
    good = StepScore(1.0, 1.0, 1.0)
    half = StepScore(1.0, 0.5, 0.0)
    zero = StepScore(0.0, 0.0, 0.0)
    tasks = [TaskScore("a", (good, good, half), True),  # EA 1, AF1 5/6, SSR 2/3
             TaskScore("b", (zero,), False),
             TaskScore("c", (good,), True)]
    m = aggregate(tasks)
    assert m["micro_element_acc"] == pytest.approx(4 / 5)
    assert m["micro_action_f1"] == pytest.approx(3.5 / 5)
    assert m["micro_step_sr"] == pytest.approx(3 / 5)
    assert m["macro_element_acc"] == pytest.approx((1 + 0 + 1) / 3)
    assert m["macro_action_f1"] == pytest.approx((5 / 6 + 0 + 1) / 3)
    assert m["macro_step_sr"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert m["task_sr"] == pytest.approx(1 / 3)
    assert m["sr_upper_bound"] == pytest.approx(2 / 3)
    assert aggregate([]) == {}


def test_fixture_splits_and_ranks():
    data = Mind2WebData(ROOT)
    ids = {s: [t.annotation_id for t in data.tasks(s)] for s in SPLITS}
    assert ids == {"train": ["train-1", "train-2"], "test_task": ["tt-1", "tt-2", "tt-3"],
                   "test_website": ["tw-1"], "test_domain": ["td-1"]}
    tt1 = data.task("test_task", "tt-1")
    assert tt1.domain == "Travel" and len(tt1.steps) == 3
    s1 = tt1.steps[0]
    assert s1.op == "CLICK" and s1.original_op == "HOVER" and s1.gold_action == "CLICK"
    assert tt1.steps[1].gold_action == "TYPE New York City"
    assert s1.pos_candidates[0].rank == 1 and s1.pos_candidates[0].attributes["id"] == "nav-flights"
    demoted = data.task("test_task", "tt-2").steps[0].pos_candidates[0]
    assert demoted.rank == 54  # outside the default top-50


def test_committed_pickle_matches_its_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk", FIXTURES / "make_mind2web_scores.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    with (ROOT / "scores_all_data.pkl").open("rb") as fh:
        assert pickle.load(fh) == mk.build(ROOT)


def test_missing_folder_names_expected_files(tmp_path):
    with pytest.raises(BenchmarkDataError) as err:
        Mind2WebData(tmp_path / "nope")
    assert "train/train_*.json" in str(err.value) and "scores_all_data.pkl" in str(err.value)
    with pytest.raises(BenchmarkDataError) as err:
        load_split(tmp_path, "test_domain")
    assert "test_domain/test_domain_*.json" in str(err.value)
    with pytest.raises(BenchmarkDataError, match="unknown Mind2Web split"):
        load_split(ROOT, "dev")


def test_malformed_files_are_clear_errors(tmp_path):
    (tmp_path / "train").mkdir()
    bad = tmp_path / "train" / "train_0.json"
    bad.write_text("{not json")
    with pytest.raises(BenchmarkDataError, match="train_0.json"):
        load_split(tmp_path, "train")
    bad.write_text(json.dumps([{"annotation_id": "x", "website": "w"}]))
    with pytest.raises(BenchmarkDataError) as err:
        load_split(tmp_path, "train")
    assert "confirmed_task" in str(err.value) and "actions" in str(err.value)
    with pytest.raises(BenchmarkDataError, match="scores_all_data.pkl"):
        load_scores(tmp_path / "scores_all_data.pkl")
    (tmp_path / "scores_all_data.pkl").write_bytes(pickle.dumps({"ranks": []}))
    with pytest.raises(BenchmarkDataError, match="'ranks' is list, expected a dict"):
        load_scores(tmp_path / "scores_all_data.pkl")


def test_scores_of_other_data_is_an_error(tmp_path):
    (tmp_path / "scores_all_data.pkl").write_bytes(pickle.dumps({"scores": {}, "ranks": {}}))
    data = Mind2WebData(ROOT, scores_path=tmp_path / "scores_all_data.pkl")
    with pytest.raises(BenchmarkDataError, match="no ranks for step 'train-1_a1'"):
        data.tasks("train")
