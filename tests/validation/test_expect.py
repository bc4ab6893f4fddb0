"""The planted expectations (edv_ray.validation.expect) against plain simulations of the
same recipe written out here, and against each other (closed form vs Monte Carlo)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edv_ray.validation.expect import Expect, twins_in_top

AGENTS = ["a", "b", "c"]
PROFILE = {
    "agents": {"a": {"success": {"airline": 0.8}}, "b": {"success": {"airline": 0.4}},
               "c": {"success": {"airline": 0.55}}},
    "memory": {"gain_correct": 0.05, "harm_wrong": 0.08},
    "writer": {"p_correct": 0.45, "contrast": 0.25, "third_party": 0.1, "sees_reward": 0.05,
               "mislabeled": 0.1, "n_items": 3},
    "verify": {"approve_correct": 0.9, "approve_wrong": 0.2, "own_run_failed": 0.5},
    "judge": {"pick_pass": 0.8},
    "self_judge": {"success_given_success": 0.9, "success_given_failure": 0.7},
}


def ex(profile=PROFILE) -> Expect:
    return Expect(profile, AGENTS, AGENTS)


def test_edv_bank_matches_a_plain_simulation():
    """Groups of two, a third-party distiller, executors' votes with the own-run bias."""
    e = ex()
    rng = np.random.default_rng(1)
    o, right, wrong, n = e.o, 0, 0, 60_000
    groups = list(itertools.combinations(AGENTS, 2))
    for _ in range(n):
        g = groups[rng.integers(3)]
        outs = [rng.random() < o.base_success(a, "airline") for a in g]
        if all(outs) or not any(outs):
            continue
        (d,) = set(AGENTS) - set(g)
        for _i in range(3):
            ok = rng.random() < o.p_item_correct(d, contrast=True, own=False, sees_reward=True)
            votes = [rng.random() < o.p_approve(v, correct=ok, own_run_failed=not s)
                     for v, s in zip(g, outs)]
            if all(votes):
                right += ok
                wrong += not ok
    bank = e.edv_bank("airline", {})
    assert bank["right"] == pytest.approx(right / n, rel=0.03)
    assert bank["wrong"] == pytest.approx(wrong / n, rel=0.15)
    assert bank["q"] == pytest.approx(right / (right + wrong), abs=0.01)


def test_audit_value_without_the_contrast_gate():
    """Lessons of all-failed groups are always wrong → P(approve) = approve_wrong + bias."""
    prof = {**PROFILE, "writer": {"p_correct": 0.0, "contrast": 0.9, "third_party": 0.0,
                                  "sees_reward": 0.0}}
    got = ex(prof).edv_bank("airline", {"require_contrast": False})["p_approve_all_failed"]
    assert got == pytest.approx(0.2 + 0.5)


def test_edv_monte_carlo_agrees_with_the_closed_form():
    """One epoch: the Monte Carlo's finite banks vs the closed form's bank quality."""
    e = ex()
    cfg = {"retrieval_k": 3, "retrieval_scope": "shared", "epochs": 1}
    mc = e.edv_curve("airline", 60, cfg, reps=300, seed=2)
    assert mc["construction"][0] == pytest.approx(np.mean([0.8, 0.4, 0.55]), abs=0.01)
    assert mc["inference"][0] == pytest.approx(e.edv_inference("airline", cfg), abs=0.006)


def test_rb_monte_carlo_without_label_effects_is_the_binomial_form():
    """With no mislabel override every item is right with p_correct whatever the judge
    says: ReasoningBank's pooled Pass@1 is E over Bin(3, p) items, agent by agent."""
    prof = {**PROFILE, "writer": {**PROFILE["writer"], "mislabeled": None}}
    e = ex(prof)
    got = e.rb_curve({"airline": ("airline", 12)}, {"retrieval_k": 1}, 1, reps=500, seed=3)[0]["airline"]
    want = np.mean([e.with_items(a, "airline", 3, 0.45) for a in AGENTS])
    assert got == pytest.approx(want, abs=0.004)


def test_rb_monte_carlo_sees_the_self_confirmation_trap():
    """A judge that calls failures successes makes RB's lessons worse than without it."""
    trap = ex().rb_curve({"airline": ("airline", 12)}, {}, 1, reps=300)[0]["airline"]
    honest = ex({**PROFILE, "self_judge": {"success_given_success": 1.0,
                                           "success_given_failure": 0.0}}
                ).rb_curve({"airline": ("airline", 12)}, {}, 1, reps=300)[0]["airline"]
    assert trap < honest - 0.02


def test_judge_closed_form_matches_a_plain_simulation():
    e = ex()
    rng = np.random.default_rng(4)
    wins = 0
    n = 40_000
    for _ in range(n):
        outs = [bool(rng.random() < e.p(a, "airline")) for a in AGENTS]
        probs = e.o.judge_pick_distribution("c", outs, [a == "c" for a in AGENTS])
        wins += outs[rng.choice(3, p=probs)]
    assert e.judge("c", "airline") == pytest.approx(wins / n, abs=0.01)


def test_best_agent_routing_gain_and_pick_probability():
    e = ex()
    assert e.best("airline") == ("a", 0.8)
    assert e.routing_gain("airline") == pytest.approx(0.8 - np.mean([0.8, 0.4, 0.55]))
    assert e.p_correct_pick("airline", {"a": 200, "b": 200, "c": 200}) > 0.999
    assert e.p_correct_pick("airline", {"a": 2, "b": 2, "c": 2}) < 0.7


def test_verdicts_on_numpy_figures_are_plain_bools():
    """An interval computed with numpy gives numpy bools; the suite's `ok is True` /
    `ok is False` tests (and the fast tests' pass sets) would then see neither."""
    from edv_ray.validation.checks import Row

    good = Row("1a x", "0.5", "0.5", np.float64(0.4) <= 0.5 <= np.float64(0.6))
    bad = Row("1b x", "0.9", "0.5", np.float64(0.4) <= 0.9 <= np.float64(0.6))
    assert good.ok is True and bad.ok is False
    assert good.verdict == "PASS" and bad.verdict == "FAIL"


def test_twins_in_the_top_k_match_a_plain_simulation_of_pairs():
    """Clean items in rank order, each hosting a twin with probability s / (1 − s) that
    ranks just below (or just above) it: the twins among the first k items."""
    rng = np.random.default_rng(5)
    for k, share in ((3, 0.4), (1, 0.2), (5, 0.3)):
        h = share / (1 - share)
        for above, want in zip((False, True), twins_in_top(k, share)):
            got = []
            for _ in range(20_000):
                seq: list[int] = []
                while len(seq) < k:
                    seq += ([1, 0] if above else [0, 1]) if rng.random() < h else [0]
                got.append(sum(seq[:k]))
            assert abs(np.mean(got) - want) < 0.03, (k, share, above)
    lo, hi = twins_in_top(3, 0.4)
    assert lo < 3 * 0.4 < hi  # random ranking lies inside the range
