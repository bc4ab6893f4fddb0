"""The simulated engine is a client of the benchmark protocol: a benchmark it has never
heard of (``tests/fixtures/toy_benchmark.py``, registered here by name in ``_ENVS``) is
played — the planted decision by its task type, the failure mode, the run marker, the
seeded draws, the user simulator, stage prompts' outcomes and the warm-up — through the
``simulated_player`` hook, with no edit to ``edv_ray/simulation``."""

from __future__ import annotations

import pytest

from edv_ray.envs import protocol
from edv_ray.simulation.oracle import Oracle
from edv_ray.simulation.outcomes import read_runs
from edv_ray.simulation.prompt_read import blocks
from edv_ray.simulation.server import Simulator
from tests.fixtures import toy_benchmark as toy

PROFILE = {"agents": {"a": {"success": {"default": 0.0, "kind_w": 1.0},
                            "failure_modes": {"wrong_argument": 1.0}}}}


@pytest.fixture
def sim(monkeypatch):
    monkeypatch.setitem(protocol._ENVS, "toy", "tests.fixtures.toy_benchmark")
    monkeypatch.setattr(toy.ENV, "player", toy.ToyPlayer())
    s = Simulator(PROFILE, [])
    s.world.benches["toy"] = toy.ToySection()  # a benchmark section the config has no type for
    return s


def _req(role: str, task_id: str, episode: str = "execute-e0-x") -> dict:
    return {"model": "sim", "messages": [{"role": "system", "content": "Solve it."},
                                         {"role": "user", "content": "Go."}],
            "user": f"edv|{role}|a|toy|{task_id}|0|{episode}"}


def test_the_engine_plays_an_unknown_benchmark_through_its_player(sim):
    oracle = Oracle(PROFILE)
    won = sim.respond(_req("agent", "w1"))["content"]
    lost = sim.respond(_req("agent", "l1"))["content"]
    assert won.startswith("WON") and lost.startswith("LOST by wrong_argument")
    # the planted outcome rides in the marker the player was handed
    assert oracle.run_outcome(won) is True and oracle.run_outcome(lost) is False
    [(d1, t1, p1), (d2, t2, p2)] = toy.ENV.player.plays
    assert (d1, t1, p1.success, p1.failure_mode) == ("toy", "w1", True, "")
    assert (d2, t2, p2.success, p2.failure_mode) == ("toy", "l1", False, "wrong_argument")
    # the draws are keyed by the episode: the same request answers the same
    assert sim.respond(_req("agent", "w1"))["content"] == won
    doors = {sim.respond(_req("agent", "w1", f"execute-e0-{i}"))["content"].split()[3]
             for i in range(40)}
    assert doors == {"left", "middle", "right"}


def test_user_stage_outcomes_and_warm_up_go_through_the_player(sim):
    assert sim.respond(_req("user_sim", "w1"))["content"] == "Please solve w1."
    prompt = ('<run label="T1">\nagent: WON, no marker here\n</run>\n'
              '<run label="T2">\nagent: LOST, none here either\n</run>\n'
              '<run label="T3">\nagent: nothing to read\n</run>')
    runs = read_runs(blocks(prompt), sim.codec, "a", "toy", "w1", sim.world)
    assert [r.success for r in runs] == [True, False, None]
    sim.warm_up()
    assert toy.ENV.player.warmed == ["toy"]


def test_a_domain_without_a_section_is_refused_by_name(sim):
    from edv_ray.simulation.server import BadRequest

    with pytest.raises(BadRequest, match="without a 'elsewhere' benchmark section"):
        sim.respond({**_req("agent", "w1"), "user": "edv|agent|a|elsewhere|w1|0|e"})
