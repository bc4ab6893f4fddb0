"""Mind2Web scores equal the release's own scorer on cases written to find departures.

``tests/fixtures/mind2web/official/`` holds the cases (task records, ranks, a scripted
model's policy) and the figures the official code gave on them
(``tests/fixtures/make_mind2web_official.py`` ran it). Here edv-ray plays the same
cases with the same scripted model and must give the same figures in mode
``official``; mode ``corrected`` differs exactly where the official code has a bug."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edv_ray.envs.mind2web.data import RankerScores, attach_ranks, parse_task
from edv_ray.envs.mind2web.episode import run_episode, task_score
from edv_ray.envs.mind2web.metrics import aggregate

OFFICIAL = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web" / "official"
CASES = {c["name"]: c for c in json.loads((OFFICIAL / "cases.json").read_text())}
EXPECTED = json.loads((OFFICIAL / "expected.json").read_text())["cases"]
FIGURES = ("micro_element_acc", "micro_action_f1", "micro_step_sr", "macro_element_acc",
           "macro_action_f1", "macro_step_sr", "task_sr", "recall_cap")
_OPTION = re.compile(r"^([B-F])\. \(button opt(\d+)\)$", re.MULTILINE)


def scripted_model(case: dict):
    """The policy the official run used: when the step's target is listed, the round's
    reply with its letter; otherwise the miss reply (``by_round``: one reply per round)."""
    sid_of = {c: f"{a}_{u}" for sid, ranks in case["ranks"].items()
              for a, u in [sid.split("_", 1)] for c in ranks}
    rounds: dict[str, int] = {}

    def complete(messages):
        listed = _OPTION.findall(messages[-1]["content"])
        sid = sid_of[listed[0][1]]
        pol = case["policy"][sid]
        n = rounds[sid] = rounds.get(sid, -1) + 1
        if pol["by_round"]:
            return pol["by_round"][min(n, len(pol["by_round"]) - 1)]
        for letter, cid in listed:
            if cid == pol["target"]:
                tpl = pol["replies"][min(n, len(pol["replies"]) - 1)]
                return tpl.replace("{L}", letter).replace("{l}", letter.lower())
        return pol["miss"]

    return complete


def play(case: dict, mode: str):
    scores = RankerScores(scores={}, ranks=case["ranks"])
    tasks = [attach_ranks(parse_task(raw, "case"), scores) for raw in case["tasks"]]
    complete = scripted_model(case)
    outs = [run_episode(t, complete, seed=case["seed"], top_k=case["top_k"], metrics=mode)
            for t in tasks]
    return outs, aggregate([task_score(o) for o in outs], mode)


@pytest.mark.parametrize("name", sorted(n for n in CASES if "error" not in EXPECTED[n]))
def test_official_mode_equals_the_official_scorer(name):
    outs, got = play(CASES[name], "official")
    want = EXPECTED[name]
    for fig in FIGURES:
        assert got[fig] == pytest.approx(want[fig], abs=1e-12), fig
    # and step by step: the same final element and action string
    ours = {f"{o.task_id}_{s.action_uid}": [s.chosen_id or "", " ".join(s.predicted_action.split())]
            for o in outs for s in o.steps}
    assert ours == {sid: [el, " ".join(act.split())] for sid, (el, act) in
                    want["predictions"].items()}


def test_the_official_scorer_crashes_when_no_step_keeps_a_positive():
    assert EXPECTED["no_positive_anywhere"]["error"].startswith("UnboundLocalError")
    _, got = play(CASES["no_positive_anywhere"], "official")
    # documented: edv-ray gives 0 where the official code raises
    assert got["official_dropped_steps"] == got["n_steps"] == 2
    assert got["macro_step_sr"] == got["task_sr"] == got["recall_cap"] == 0.0


CORRECTED = {  # hand-computed; the official figures are in expected.json
    # t1 = [ok, TYPE Rome answered Milan], t2 = [ok, no positive]
    "last_step_no_positive": {"macro_element_acc": 0.75, "macro_action_f1": 0.625,
                              "macro_step_sr": 0.5, "task_sr": 0.0},
    # t1 = [ok], t2 = [ok, no positive], t3 = [no positive]
    "last_task_no_positive": {"macro_element_acc": 0.5, "macro_action_f1": 0.5,
                              "macro_step_sr": 0.5, "task_sr": 1 / 3},
    # every gold line kept: F1 1, 0.8, 0.8, 1, 1, 1
    "multiline_gold": {"micro_action_f1": 5.6 / 6, "macro_action_f1": 5.6 / 6,
                       "micro_step_sr": 4 / 6, "macro_step_sr": 4 / 6, "task_sr": 0.0},
}


@pytest.mark.parametrize("name", sorted(n for n in CASES if "error" not in EXPECTED[n]))
def test_corrected_mode_departs_only_where_the_official_code_is_wrong(name):
    _, got = play(CASES[name], "corrected")
    want = {f: EXPECTED[name][f] for f in FIGURES} | CORRECTED.get(name, {})
    for fig in FIGURES:
        assert got[fig] == pytest.approx(want[fig], abs=1e-12), fig
    assert got["official_dropped_steps"] == 0
    if name in CORRECTED:  # the switch changes something here
        assert any(got[f] != pytest.approx(EXPECTED[name][f]) for f in CORRECTED[name])


def test_official_mode_records_what_it_dropped():
    _, got = play(CASES["last_task_no_positive"], "official")
    assert got["official_dropped_steps"] == 2 and got["n_tasks"] == 3
    assert got["sr_upper_bound"] == pytest.approx(1 / 3)  # edv-ray's own, over every task
    with pytest.raises(ValueError, match="appears twice"):
        outs, _ = play(CASES["one_step_tasks"], "official")
        aggregate([task_score(outs[0]), task_score(outs[0])])
