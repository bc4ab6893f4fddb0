"""The simulated engine in stage roles, asked exactly as the framework asks (the real
prompt builders and strict answer schemas, our client, real HTTP): planted rates of
correct items, approvals, picks and self-judgements recovered; answers always valid."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from edv_ray.envs.tau2.env import render_transcript
from edv_ray.methods.answers import ask_json
from edv_ray.methods.edv.records import TrajectoryView
from edv_ray.methods.edv.stages import distill, vote
from edv_ray.methods.judge import JudgeAnswer
from edv_ray.methods.reasoning_bank.learn import RBItems, RBJudgeAnswer
from edv_ray.prompts import fence, render_prompt
from edv_ray.simulation.codec import strip_marks
from edv_ray.simulation.oracle import Oracle
from edv_ray.testing.helpers import tau2_tasks
from tests.simulation.sim_helpers import caller, ctx, play_tau2, serving, within

TASK = {t.id: t for t in tau2_tasks("mock")}["update_task_1"]
POLICY = "Be helpful; follow the task tools."
PROFILE = {
    "agents": {"win": {"success": {"default": 1.0}}, "lose": {"success": {"default": 0.0}},
               "c": {"success": {"default": 0.5}}},
    "writer": {"p_correct": 0.2, "contrast": 0.3, "third_party": 0.2, "sees_reward": 0.1,
               "mislabeled": 0.05},
    "verify": {"approve_correct": 0.9, "approve_wrong": 0.1, "own_run_failed": 0.4, "own_lesson": 0.3},
    "judge": {"pick_pass": 0.75},
    "self_judge": {"success_given_success": 0.9, "success_given_failure": 0.6},
    "writers": {"twin": 0.0},
}


@pytest.fixture(scope="module")
def world():
    """The engine serving PROFILE, and one real run of `win` (succeeds) and `lose` (fails)."""
    with serving(PROFILE) as (sim, ep):
        runs = {}
        for i, agent in enumerate(("lose", "win"), 1):
            out = play_tau2(ep, agent, TASK)  # solo: the transcript holds no text turn
            assert out.success == (agent == "win")
            runs[agent] = TrajectoryView(label=f"T{i}", episode_id=f"e-{agent}", agent=agent,
                                         success=out.success, reward=out.reward,
                                         transcript=render_transcript(out.messages, 10 ** 6))
        yield sim, ep, runs, Oracle(PROFILE)


def _distilled(ep, runs, distiller, sees_reward, n_calls=60):
    items = []
    for k in range(n_calls):
        res = distill(TASK.ticket, POLICY, runs, caller(ep, ctx("distiller", distiller, task_id=TASK.id, trial=k)),
                      sees_reward=sees_reward, max_candidates=3, retries=0)
        assert res.status == "ok" and len(res.experiences) == 3
        items += res.experiences
    return items


def test_distiller_correctness_depends_on_what_it_sees(world):
    _sim, ep, runs, oracle = world
    contrast = [runs["lose"], runs["win"]]
    # third party, success/failure contrast, rewards shown: 0.2 + 0.3 + 0.2 + 0.1
    got = _distilled(ep, contrast, "c", True)
    assert within(sum(oracle.item_is_correct(e.rule) for e in got), len(got), 0.8)
    # its own run only, no reward shown (the outcome is inferred from the transcript): 0.2
    got = _distilled(ep, [runs["win"]], "win", False)
    assert within(sum(oracle.item_is_correct(e.rule) for e in got), len(got), 0.2)
    # the contrast is recognised without rewards too: 0.2 + 0.3 + 0.2
    got = _distilled(ep, contrast, "c", False)
    assert within(sum(oracle.item_is_correct(e.rule) for e in got), len(got), 0.7)
    assert all(oracle.item_written_by(e.rule, "c") and oracle.item_relevant(e.rule, "mock", "mock")
               for e in got)


def _marked(run: TrajectoryView, truth: bool, shown: bool, codec) -> TrajectoryView:
    """``run`` with the engine's marker of outcome ``truth`` in its transcript (as a text
    turn carries one) and the grade ``shown`` in its run block."""
    return run.model_copy(update={"success": shown, "reward": float(shown),
                                  "transcript": run.transcript + "\n"
                                  + codec.marker(truth, run.agent, run.episode_id)})


def test_roles_act_on_the_grade_they_are_shown_and_the_engine_knows_the_truth(world):
    """Grade-aware roles (issue 27): a framework that shows wrong grades moves what the
    engine answers; shown the true grades, nothing changes."""
    _sim, ep, runs, oracle = world
    codec = oracle.codec
    true_grades = [_marked(runs["lose"], False, False, codec), _marked(runs["win"], True, True, codec)]
    inverted = [_marked(runs["lose"], False, True, codec), _marked(runs["win"], True, False, codec)]
    got = _distilled(ep, true_grades, "c", True)
    assert within(sum(oracle.item_is_correct(e.rule) for e in got), len(got), 0.8)
    # shown inverted grades, the writer writes from mislabelled runs: P(correct) = 0.05
    got = _distilled(ep, inverted, "c", True)
    assert within(sum(oracle.item_is_correct(e.rule) for e in got), len(got), 0.05)

    def approvals(verifier: str, context, n=150):
        ok = 0
        for k in range(n):
            rule = "Confirm the task id first. " + codec.item_tag(False, "mock/mock", "c", f"g{k}")
            r = vote(TASK.ticket, POLICY, context, "Confirm ids", "When updating", rule,
                     caller(ep, ctx("verifier", verifier, task_id=TASK.id, trial=1000 + k)),
                     retries=0, sees_reward=True)
            ok += r.approve
        return ok, n

    # a verifier approves wrong items more when it believes its own run failed (+0.4)
    assert within(*approvals("lose", [true_grades[0]]), 0.5)
    assert within(*approvals("lose", [inverted[0]]), 0.1)  # its failed run shown as passed
    assert within(*approvals("win", [inverted[1]]), 0.5)  # its passed run shown as failed
    # a Judge shown the grades picks the run shown as passing (pick_pass_shown 1.0)
    blocks = "\n".join(f'<run label="T{i}" outcome="{"success" if r.success else "failure"}">'
                       f"\n{fence(r.transcript)}\n</run>" for i, r in enumerate(inverted, 1))
    prompt = render_prompt("methods", "judge_pick.v1", task_noun="customer-service task",
                           task=fence(TASK.ticket), policy=POLICY, runs=blocks)
    for k in range(20):
        ans, _n, err = ask_json(caller(ep, ctx("judge", "c", task_id=TASK.id, trial=k)), prompt,
                                JudgeAnswer, 0)
        assert ans is not None and ans.pick == "T1", err  # the failed run, shown as passed


def test_distilled_items_are_diverse_and_found_by_their_task(world):
    """Near-duplicates (cosine ≥ 0.92) would be merged by the bank; retrieval embeds
    the observed task text and must find a task's own items first."""
    from edv_ray.memory import Embedder

    _sim, ep, runs, _oracle = world
    texts = {}  # tasks with distinct tickets (equal tickets may well teach equal lessons)
    for t in tau2_tasks("mock"):
        if t.ticket and t.ticket not in texts.values():
            texts[t.id] = t.ticket
    items = {}
    for tid, text in texts.items():
        res = distill(text, POLICY, [runs["lose"], runs["win"]],
                      caller(ep, ctx("distiller", "c", task_id=tid)), sees_reward=True,
                      max_candidates=3, retries=0)
        items[tid] = [f"### {e.title}\nWhen to use: {e.when_to_use}\nRule: {e.rule}" for e in res.experiences]
    emb = Embedder()
    ids = list(texts)
    tickets = emb.embed(list(texts.values()))
    same_topic = {(a, b) for i, a in enumerate(ids) for j, b in enumerate(ids)
                  if a != b and float(tickets[i] @ tickets[j]) >= 0.9}  # e.g. task_1 / task_2
    flat = [(tid, x) for tid, xs in items.items() for x in xs]
    vecs = emb.embed([x for _t, x in flat])
    n = len(flat)
    pairs = [(i, j) for i in range(n) for j in range(n)
             if i != j and (flat[i][0], flat[j][0]) not in same_topic]
    assert max(float(vecs[i] @ vecs[j]) for i, j in pairs) < 0.92
    # a ticket's own items are nearer to it than any item of a task on another topic
    for qi, tid in enumerate(ids):
        own = max(float(tickets[qi] @ vecs[j]) for j in range(n) if flat[j][0] == tid)
        others = [float(tickets[qi] @ vecs[j]) for j in range(n)
                  if flat[j][0] != tid and (tid, flat[j][0]) not in same_topic]
        assert own > max(others), tid


def test_verifier_approval_and_self_confirmation_bias(world):
    _sim, ep, runs, oracle = world
    tags = oracle.codec

    def rate(rule_of, verifier, context, n=150):
        ok = 0
        for k in range(n):
            rule = "Confirm the task id before updating it. " + rule_of(k)
            r = vote(TASK.ticket, POLICY, context, "Confirm ids", "When updating", rule,
                     caller(ep, ctx("verifier", verifier, task_id=TASK.id, trial=k)), retries=0, sees_reward=True)
            assert r.parse_ok
            ok += r.approve
        return ok, n

    correct = lambda k: tags.item_tag(True, "mock/mock", "c", f"x{k}")
    wrong = lambda k: tags.item_tag(False, "mock/mock", "c", f"y{k}")
    own_wrong = lambda k: tags.item_tag(False, "mock/mock", "lose", f"z{k}")
    assert within(*rate(correct, "win", [runs["win"]]), 0.9)
    assert within(*rate(wrong, "win", [runs["win"]]), 0.1)
    assert within(*rate(wrong, "lose", [runs["lose"]]), 0.5)  # its own run failed: +0.4
    assert within(*rate(own_wrong, "lose", [runs["lose"]]), 0.8)  # and it wrote the item: +0.3
    # an item the engine did not write (the framework's poison rules) counts as wrong
    assert within(*rate(lambda k: f"variant {k}", "win", [runs["win"]]), 0.1)


def _judge_prompt(runs) -> str:
    blocks = "\n".join(f'<run label="T{i}">\n{fence(r.transcript)}\n</run>' for i, r in enumerate(runs, 1))
    return render_prompt("methods", "judge_pick.v1", task_noun="customer-service task",
                         task=fence(TASK.ticket), policy=POLICY, runs=blocks)


def test_judge_picks_a_passing_run_at_the_planted_rate(world):
    _sim, ep, runs, oracle = world
    prompt = _judge_prompt([runs["lose"], runs["win"]])  # no rewards shown
    labels = {"T1", "T2"}
    picks = []
    for k in range(200):
        ans, _n, err = ask_json(caller(ep, ctx("judge", "c", task_id=TASK.id, trial=k)), prompt, JudgeAnswer, 0,
                                lambda a: None if a.pick in labels else (_ for _ in ()).throw(ValueError()))
        assert ans is not None, err
        picks.append(ans.pick)
    assert oracle.p_judge_picks_pass("c", [False, True]) == 0.75
    assert within(picks.count("T2"), len(picks), 0.75)


def test_rb_self_judge_trap_and_mislabeled_extraction(world):
    _sim, ep, runs, oracle = world
    judged = []
    for k in range(200):
        p = render_prompt("methods/reasoning_bank", "rb_judge.v1", task_noun="task", task=fence(TASK.ticket),
                          policy=POLICY, max_items=3, trajectory=fence(runs["lose"].transcript))
        ans, _n, err = ask_json(caller(ep, ctx("self_judge", "lose", task_id=TASK.id, trial=k)), p, RBJudgeAnswer, 0)
        assert ans is not None, err
        judged.append(ans.status == "success")
    assert within(sum(judged), len(judged), oracle.p_self_label_success("lose", False))
    # strategies drawn from a failed run the self-judge called a success: mislabeled
    items = []
    for k in range(50):
        p = render_prompt("methods/reasoning_bank", "rb_extract_success.v2", task_noun="task",
                          task=fence(TASK.ticket), policy=POLICY, max_items=3, lesson_bounds="",
                          trajectory=fence(runs["lose"].transcript))
        got, _n, err = ask_json(caller(ep, ctx("extractor", "lose", task_id=TASK.id, trial=k)), p, RBItems, 0)
        assert got is not None, err
        items += got.items
    assert within(sum(oracle.item_is_correct(i.content) for i in items), len(items), 0.05)


class TwinAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    rule: str
    tags: list[str]
    confidence: int


def test_unknown_roles_get_a_valid_schema_object_with_a_wrong_tag(world):
    _sim, ep, _runs, oracle = world
    ans, _n, err = ask_json(caller(ep, ctx("twin", "c", task_id=TASK.id)), "Rewrite this lesson into a wrong twin: "
                            "confirm the task id before updating it.", TwinAnswer, 0)
    assert ans is not None, err
    assert oracle.item_truth(ans.rule) is not None and not oracle.item_is_correct(ans.rule)


def test_stage_answers_reproduce_per_seed(world):
    runs = world[2]

    def answers(profile_seed):
        with serving(dict(PROFILE, seed=profile_seed)) as (_s, ep2):
            return [distill(TASK.ticket, POLICY, [runs["lose"], runs["win"]],
                            caller(ep2, ctx("distiller", "c", task_id=TASK.id, trial=k)), sees_reward=True,
                            max_candidates=3, retries=0).experiences for k in range(5)]
    assert answers(7) == answers(7)
    assert answers(7) != answers(8)


def test_answers_without_a_schema_follow_the_role(world):
    """json_mode json_object / none sends no schema: the role decides the answer's shape."""
    from edv_ray.config import Sampling
    from edv_ray.llm.client import CallLedger
    from edv_ray.methods.jobkit import RoleBinding, json_caller
    from tests.simulation.sim_helpers import CLIENT

    _sim, ep, runs, _oracle = world
    for mode in ("json_object", "none"):
        binding = RoleBinding(endpoint=ep, sampling=Sampling(), json_mode=mode)
        call = json_caller(CLIENT, binding, ctx("verifier", "win", task_id=TASK.id), CallLedger())
        r = vote(TASK.ticket, POLICY, [runs["win"]], "t", "w", "Confirm ids first.", call,
                 retries=0, sees_reward=True)
        assert r.parse_ok


def test_contamination_twin_keeps_the_situation_and_turns_the_rule_wrong(world):
    """The framework's own twin prompt: the engine answers the wrong twin of the lesson
    shown — same title and situation, the host's rule in its own words with the advice
    withdrawn (so retrieval ranks it beside its host), tagged wrong (writers: twin 0.0)."""
    from edv_ray.methods.contamination import TwinAnswer as FrameworkTwin

    _sim, ep, runs, oracle = world
    # a right lesson (the distiller's draw depends on the prompt's text): a wrong one's
    # twin is the same wrong rule
    host = next(h for h in _distilled(ep, [runs["lose"], runs["win"]], "c", True, n_calls=4)
                if oracle.item_is_correct(h.rule))
    prompt = render_prompt("methods", "contamination_twin.v2", task_noun="task", policy=POLICY, lesson_bounds="",
                           title=fence(host.title), when_to_use=fence(host.when_to_use),
                           rule=fence(host.rule))
    ans, _n, err = ask_json(caller(ep, ctx("twin", "c", task_id=TASK.id)), prompt, FrameworkTwin, 0)
    assert ans is not None, err
    assert (ans.title, ans.when_to_use) == (host.title, host.when_to_use)
    visible = strip_marks(host.rule).strip()
    assert strip_marks(ans.rule).strip() == f"Skip this step: {visible}"
    assert oracle.item_truth(ans.rule) is not None and not oracle.item_is_correct(ans.rule)
