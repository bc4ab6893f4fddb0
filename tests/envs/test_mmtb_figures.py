"""MMTB's figures on the corner cases of ``diff-8`` (tests/fixtures/mmtb/differential),
computed by hand, official and corrected, and the run's scoring check that prints them.

diff-8's four missions and what the scripted model does:
  0. 反, gold: ask → get_weather ∥ get_news → answer (parallel structure: a clarify
     mission counts in A^P). Asks, makes both calls at once, answers: correct, optimal.
  1. 多, gold: get_exchange_rate ∥ get_stock_price(AAPL). Both at once (the fewest turns)
     with symbol MSFT: stage 1 passes, optimal, argument score 0 → wrong.
  2. 单, gold: get_news(topic=sports). Calls get_news with no argument: the official
     check divides by zero.
  3. 反, gold: ask → get_flight. Asks through the ask tool: the official check's name
     counts differ (assert).
The official analysis relabels stage 1 of missions 2 and 3 "error" (its argument check
raised); corrected keeps the walk's "correct". Official figures, by hand:
  overall 1/4; 单 0/1; 多 0/1; 拒 none; 反 1/2 (missions 0, 3);
  A^P 1/2 (missions 0, 1 — every type); A^S, A^{S+P} none;
  optimal path = correct AND optimal / parallel + serial+parallel missions = 1/2
  (a count of optimal among correct 多 missions would give 0/0; a 多-only A^P 0/1).
Corrected: the same verdicts here (a 0 score fails missions 2 and 3 as well).
"""

from __future__ import annotations

import json

import duckdb
import pytest
import yaml

from edv_ray.envs.mmtb.episode import mission_results
from edv_ray.envs.mmtb.metrics import DEPARTURES, FIGURES, breakdown
from edv_ray.report.scoring_checks import benchmark_figures
from edv_ray.testing.helpers import scripted_config
from tests.envs.test_mmtb_official import FIX, _json, play

HAND = {"overall": 0.25, "single": 0.0, "multi": 0.0, "chat": None, "clarify": 0.5,
        "parallel": 0.5, "serial": None, "serial_parallel": None, "optimal_path": 0.5}


def _diff8(mode: str):
    [out] = [o for o in play("differential", "en", mode) if o.task_id == "diff-8"]
    return out


@pytest.mark.parametrize("mode", ["official", "corrected"])
def test_hand_computed_figures(mode):
    out = _diff8(mode)
    got = breakdown(mission_results(out.missions))
    assert {k: got[k] for k in FIGURES} == HAND
    assert (got["n_parallel"], got["n_optimal_path"], got["n_dropped"]) == (2.0, 2.0, 0.0)
    m = out.missions
    assert [x.structure for x in m] == ["parallel", "parallel", None, None]
    assert m[1].calls_correct and m[1].optimal and not m[1].correct  # optimal but wrong


def test_stage1_labels_where_the_official_check_raises():
    official, corrected = _diff8("official").missions, _diff8("corrected").missions
    assert [x.calls_correct for x in official] == [True, True, False, False]
    assert [x.reason for x in official] == ["", "arguments", "argument_check_raised",
                                            "argument_check_raised"]
    assert [x.calls_correct for x in corrected] == [True, True, True, True]
    assert [x.reason for x in corrected][2:] == ["arguments", "arguments"]
    # what the official code itself said (make_official_figures.py)
    theirs = {m["idx"]: m for m in _json("differential", "official.json")["en"]["missions"]
              if m["id"] == "diff-8"}
    assert [theirs[i]["analysed"] == "correct" for i in range(4)] == [True, True, False, False]
    assert [theirs[i]["stage1"] for i in range(4)] == ["correct"] * 4


def _run_folder(mode: str, tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE episodes (episode_id VARCHAR, reward_json VARCHAR)")
    con.execute("CREATE TABLE method_results (method VARCHAR, epoch INT, agent VARCHAR, "
                "trial INT, task_id VARCHAR, episode_id VARCHAR)")
    for o in play("differential", "en", mode):
        if o.task_id not in ("diff-8", "diff-4"):
            continue
        detail = o.to_dict()
        detail.pop("messages")
        con.execute("INSERT INTO episodes VALUES (?, ?)", [o.task_id, json.dumps(detail)])
        con.execute("INSERT INTO method_results VALUES ('edv', 0, 'a', 0, ?, ?)",
                    [o.task_id, o.task_id])
    cfg = scripted_config("http://127.0.0.1:9/v1", tmp_path)
    cfg["benchmark"] = {"name": "mmtb", "data_dir": str(FIX / "differential"), "metrics": mode}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return con


def test_the_scoring_check_prints_the_figures_and_how_corrected_departs(tmp_path):
    # diff-4 + diff-8: official leaves out diff-4's missions from its crash on (1-3);
    # corrected scores them (1 wrong, 2 拒 right, 3 多 parallel right and optimal)
    [off] = benchmark_figures(_run_folder("official", tmp_path), tmp_path)
    assert off.ok and off.method == "edv"
    assert off.figure == ("a, epoch 0 — official: all 0.400, 单 0.500, 多 0.000, 拒 -, "
                          "反 0.500, A^P 0.500, A^S -, A^{S+P} -, optimal path 0.500; "
                          "5 missions, 3 dropped")
    assert "whatever its type" in off.detail and "correct and optimal" in off.detail
    [cor] = benchmark_figures(_run_folder("corrected", tmp_path), tmp_path)
    assert cor.figure == ("a, epoch 0 — corrected: all 0.500, 单 0.333, 多 0.500, 拒 1.000, "
                          "反 0.500, A^P 0.667, A^S -, A^{S+P} -, optimal path 0.667; "
                          "8 missions, 0 dropped")
    for k in FIGURES:  # every figure's departure is stated
        assert DEPARTURES[k] in cor.detail
    assert "stage-1 labels" in cor.detail
    # episodes scored officially, the config saying corrected: a failed check
    con = _run_folder("official", tmp_path)
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    cfg["benchmark"]["metrics"] = "corrected"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    [mixed] = benchmark_figures(con, tmp_path)
    assert not mixed.ok and "modes ['official']" in mixed.detail
