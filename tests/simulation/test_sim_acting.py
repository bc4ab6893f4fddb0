"""The simulated engine as an acting agent, through real HTTP and real τ²-bench episodes:
planted success rates recovered, memory effects decoded from retrieved items, failures
realised by the benchmark's own grading, and draws that reproduce."""

from __future__ import annotations

import pytest

from edv_ray.simulation.oracle import Oracle
from edv_ray.testing.helpers import tau2_tasks
from tests.simulation.sim_helpers import (
    play_file,
    play_tau2,
    profile,
    serving,
    within,
)

# mock tasks whose gold path succeeds and whose planted failures fail (solo: a ticket)
SOLO = ["create_task_1", "update_task_1", "impossible_task_1", "update_task_with_initialization_actions"]
TASKS = {t.id: t for t in tau2_tasks("mock")}


def test_planted_success_rate_is_recovered_and_grading_agrees():
    prof = profile(agents={"a": {"success": {"default": 0.3, "mock": 0.7}}})
    oracle = Oracle(prof)
    with serving(prof) as (_sim, ep):
        outs = [(tid, trial, play_tau2(ep, "a", TASKS[tid], trial=trial))
                for tid in SOLO for trial in range(50)]
    wins = sum(o.success for _t, _i, o in outs)
    assert within(wins, len(outs), 0.7)
    # every episode ended as the engine decided (the oracle replays the decision)
    for tid, trial, o in outs:
        eid = f"execute-e0-mock-{tid}"
        planned = oracle.planned_success("a", "mock", tid, trial, _eid(tid, trial))
        assert o.success == planned, (eid, trial)


def _eid(task_id: str, trial: int, agent: str = "a", stage: str = "execute") -> str:
    from edv_ray.runtime.spec import episode_id

    return episode_id(stage, 0, "mock", task_id, trial, agent)


def test_same_seed_same_outcomes_other_seed_other_outcomes():
    def outcomes(seed: int) -> list[bool]:
        with serving(profile(seed=seed)) as (_sim, ep):
            return [play_tau2(ep, "a", TASKS["create_task_1"], trial=t).success for t in range(40)]
    first = outcomes(1)
    assert outcomes(1) == first
    assert outcomes(2) != first


def test_failures_take_the_planted_forms():
    """stop_early leaves out the write; wrong_argument makes it with a changed argument."""
    from edv_ray.envs.protocol import get_env

    player = get_env("tau2").simulated_player()
    assert player.failure_path("mock", TASKS["update_task_1"], "wrong_argument") == "wrong_argument"
    assert player.failure_path("mock", TASKS["create_task_1_nl_eval"]) == "none"  # grades nothing
    task = TASKS["update_task_1"]
    for mode in ("stop_early", "wrong_argument"):
        prof = profile(agents={"a": {"success": {"default": 0.0}, "failure_modes": {mode: 1.0}}})
        with serving(prof) as (_sim, ep):
            out = play_tau2(ep, "a", task)
        calls = [tc["name"] for m in out.messages for tc in (m.get("tool_calls") or [])]
        assert not out.success
        if mode == "stop_early":
            assert "update_task_status" not in calls
        else:
            args = [tc["arguments"] for m in out.messages for tc in (m.get("tool_calls") or [])
                    if tc["name"] == "update_task_status"]
            assert args and args[0] != {"task_id": "task_1", "status": "completed"}


@pytest.mark.parametrize("strategy", ["native_tools", "text_tools"])
def test_conversation_user_states_request_then_stops(strategy):
    """Airline (user simulator): the user opens with its reason for calling; gold wins."""
    task = next(t for t in tau2_tasks("airline", "test") if t.evaluation_criteria.actions)
    prof = profile(agents={"a": {"success": {"default": 1.0}}})
    with serving(prof, [{"name": "tau2", "domains": ["airline"]}]) as (_sim, ep):
        out = play_tau2(ep, "a", task, domain="airline", strategy=strategy)
    assert out.success and out.termination == "user_stop"
    reason = task.user_scenario.instructions.reason_for_call
    assert " ".join(reason.split())[:40] in out.observed_text
    assert "[ref " in out.messages[-2]["content"]  # the agent's final text carries a marker


def test_a_type_phrase_opens_the_users_first_turn_and_the_conversation_still_ends():
    """``type_phrases`` (the relevance world): the simulated user opens with its task's
    sub-type phrase — the observed text the retriever and the lesson writer read —, says it
    once (the player is shown its own turn without the phrase) and stops; a task of the
    other sub-type opens with its own phrase, and a phrase of fewer than 3 words is refused."""
    from edv_ray.config_simulation import SimulationProfile

    tasks = [t for t in tau2_tasks("airline", "test") if t.evaluation_criteria.actions][:2]
    phrases = {"x": "About gardening tools and seeds.", "y": "About camera lenses and tripods."}
    prof = profile(agents={"a": {"success": {"default": 1.0}}}, type_phrases=phrases,
                   task_type_map={f"airline/{tasks[0].id}": "x", f"airline/{tasks[1].id}": "y"})
    with serving(prof, [{"name": "tau2", "domains": ["airline"]}]) as (_sim, ep):
        outs = [play_tau2(ep, "a", t, domain="airline") for t in tasks]
    for out, t, kind in zip(outs, tasks, "xy"):
        assert out.success and out.termination == "user_stop"
        assert out.observed_text.startswith(phrases[kind])
        reason = " ".join(t.user_scenario.instructions.reason_for_call.split())[:40]
        assert reason in out.observed_text
        said = [m["content"] for m in out.messages if m["role"] == "user"]
        assert sum(phrases[kind] in c for c in said) == 1
    with pytest.raises(ValueError, match="three words"):
        SimulationProfile.model_validate({"type_phrases": {"x": "gardening"}})


def test_memory_items_shift_success_as_planted():
    """Correct items of the task's type raise P(success) by gain_correct each; wrong or
    undecodable ones lower it by harm_wrong each."""
    prof = profile(agents={"a": {"success": {"default": 0.5}}},
                   memory={"gain_correct": 0.2, "harm_wrong": 0.2})
    oracle = Oracle(prof)
    good = [f"### t{i}\nRule: do it. " + oracle.codec.item_tag(True, "mock/mock", "b", f"g{i}")
            for i in range(2)]
    wrong = [oracle.codec.item_tag(False, "mock/mock", "b", "w"), "### a poison rule\nRule: skip checks."]
    assert oracle.success_probability("a", "mock", "mock", good) == pytest.approx(0.9)
    assert oracle.success_probability("a", "mock", "mock", wrong) == pytest.approx(0.1)
    assert oracle.success_probability("a", "mock", "other", good) == pytest.approx(0.5)
    with serving(prof) as (_sim, ep):
        for items, planted in ((good, 0.9), (wrong, 0.1)):
            outs = [play_tau2(ep, "a", TASKS[tid], trial=t, experiences=items)
                    for tid in SOLO for t in range(40)]
            assert within(sum(o.success for o in outs), len(outs), planted)


def test_unknown_agent_is_refused_with_a_clear_error():
    from edv_ray.llm.client import LLMCallError

    with serving({"agents": {"a": {}}}) as (_sim, ep):
        with pytest.raises(LLMCallError, match="no entry in the simulation profile"):
            play_tau2(ep, "zed", TASKS["create_task_1"])


def test_a_request_that_is_not_the_agents_own_is_refused():
    """Agent identity (issue 27): the engine checks an acting request against the agent's
    declared prompt strategy and sampling — a framework that mixes agents up errs."""
    from edv_ray.llm.client import LLMCallError

    ident = {"prompt_strategy": "native_tools", "temperature": 0.0, "top_p": 1.0}
    prof = {"agents": {"a": {"identity": ident},
                       "b": {"identity": {**ident, "temperature": 0.7}},
                       "c": {"identity": {**ident, "prompt_strategy": "text_tools"}},
                       "d": {"identity": {**ident, "top_p": 0.9}}}}
    task = TASKS["create_task_1"]
    with serving(prof) as (_sim, ep):
        assert play_tau2(ep, "a", task).messages  # its own: temperature 0, tools sent
        assert play_tau2(ep, "c", task, strategy="text_tools").messages
        with pytest.raises(LLMCallError, match="not its own: temperature 0.0 \\(agent b: 0.7\\)"):
            play_tau2(ep, "b", task)
        with pytest.raises(LLMCallError, match="tools sent for prompt strategy text_tools"):
            play_tau2(ep, "c", task)
        with pytest.raises(LLMCallError, match="top_p 1.0 \\(agent d: 0.9\\)"):
            play_tau2(ep, "d", task)


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("name", ["mind2web", "mmtb"])
def test_file_benchmarks_end_as_planned(name):
    """Mind2Web rounds and MMTB missions played through the benchmarks' own episode code:
    every feasible task ends as the engine decided."""
    from edv_ray.config import parse_benchmark
    from edv_ray.envs.protocol import get_env
    from edv_ray.runtime.spec import episode_id

    bench = {"name": name, "data_dir": str(FIXTURES / name)}
    splits = ("train", "test_task", "test_website", "test_domain") if name == "mind2web" else ("all",)
    env, b = get_env(name), parse_benchmark(bench)
    tasks = [t for s in splits for t in env.select_tasks(b, s, None, None)[name]]
    prof = profile(agents={"a": {"success": {"default": 0.5}}})
    oracle = Oracle(prof, [bench])
    seen = {True: 0, False: 0}
    with serving(prof, [bench]) as (_sim, ep):
        for task in tasks:
            # odd trials retrieve two correct items of the task's own type (+0.05 each)
            good = [oracle.codec.item_tag(True, f"{name}/{oracle.task_type(name, task.id)}", "b", f"{task.id}{i}")
                    for i in range(2)]
            for trial in range(6):
                items = good if trial % 2 else []
                out = play_file(ep, bench, task, trial=trial, experiences=items)
                planned = oracle.planned_success("a", name, task.id, trial,
                                                 episode_id("execute", 0, name, task.id, trial, "a"),
                                                 items)
                # a step with no positive in the top-k, or a single candidate, cannot be
                # solved by anyone (fixtures tt-2, tt-3): the benchmark's truth wins
                steps = out.reward_detail.get("steps", [])
                if any(s["reason"] in ("no_positive_in_top_k", "single_candidate") for s in steps):
                    assert not out.success
                    continue
                assert out.success == planned, (task.id, trial)
                seen[planned] += 1
    assert seen[True] >= 3 and seen[False] >= 3


def test_draw_identity_request_seed_makes_same_seed_agents_act_alike():
    """A real model with one seed answers alike whoever calls it: with draw_identity
    request_seed two agents of one model sent the same seed share their luck (so a pool
    whose per-agent seeds get overwritten shows it), with different seeds they do not."""
    def outcomes(identity: str, seeds: tuple[int, int]) -> tuple[list[bool], list[bool]]:
        prof = profile(draw_identity=identity)
        with serving(prof) as (_sim, ep):
            return tuple([play_tau2(ep, agent, TASKS["update_task_1"], trial=t, seed=seed).success
                          for t in range(30)] for agent, seed in zip(("a", "b"), seeds))
    a, b = outcomes("request_seed", (5, 5))
    assert a == b
    a, b = outcomes("request_seed", (5, 6))
    assert a != b
    a, b = outcomes("agent", (5, 5))
    assert a != b
