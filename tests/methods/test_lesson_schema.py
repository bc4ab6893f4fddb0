"""One lesson schema (memory/records.py: ``Lesson``, ``LESSON_BOUNDS``): every role's
answer that holds a lesson — the distiller's, the contamination writer's, ReasoningBank's
item — and a bank's item refuse the same too-long or too-short parts, and the prompts
asking for a lesson state those bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edv_ray.memory.records import LESSON_BOUNDS, Experience, MemoryItem, lesson_bounds_text
from edv_ray.methods.contamination import TwinAnswer
from edv_ray.methods.edv.records import DistilledExperience
from edv_ray.methods.reasoning_bank.learn import RBItem

OK = {"title": "Confirm first", "when_to_use": "A user asks to cancel.",
      "rule": "Read back the reservation id and get a yes before cancelling."}


def _as(cls, parts: dict) -> dict:
    """The parts under the names ``cls`` uses (ReasoningBank: description, content)."""
    if cls is RBItem:
        return {"title": parts["title"], "description": parts["when_to_use"], "content": parts["rule"]}
    if cls is MemoryItem:
        return dict(parts, bank="shared")
    return parts


ROLES = [Experience, MemoryItem, DistilledExperience, TwinAnswer, RBItem]


@pytest.mark.parametrize("cls", ROLES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("part", list(LESSON_BOUNDS))
def test_every_role_holds_the_same_bounds(cls, part):
    low, high = LESSON_BOUNDS[part]
    fill = "x" if part != "when_to_use" else "y"  # one sentence for RB's description
    cls.model_validate(_as(cls, dict(OK, **{part: fill * high})))  # the longest allowed
    cls.model_validate(_as(cls, dict(OK, **{part: fill * low})))  # the shortest allowed
    with pytest.raises(ValidationError):
        cls.model_validate(_as(cls, dict(OK, **{part: fill * (high + 1)})))
    with pytest.raises(ValidationError):
        cls.model_validate(_as(cls, dict(OK, **{part: " " + fill * (low - 1) + "  "})))


def test_a_too_long_title_is_refused_by_each_role():
    for cls in ROLES:
        with pytest.raises(ValidationError, match="at most 200 characters"):
            cls.model_validate(_as(cls, dict(OK, title="t" * 201)))


def test_each_answer_schema_holds_the_one_set_of_bounds():
    from edv_ray.methods.edv.records import DistillAnswer

    lesson = DistillAnswer.model_json_schema()["$defs"]["DistilledExperience"]["properties"]
    twin = TwinAnswer.model_json_schema()["properties"]
    rb = RBItem.model_json_schema()["properties"]
    for ours, theirs in (("title", "title"), ("when_to_use", "description"), ("rule", "content")):
        low, high = LESSON_BOUNDS[ours]
        for props, name in ((lesson, ours), (twin, ours), (rb, theirs)):
            assert (props[name]["minLength"], props[name]["maxLength"]) == (low, high), name


def test_the_prompts_asking_for_lessons_state_the_bounds():
    """Constrained decoding gets no lengths (methods/answers.py): the prompt is where a
    model learns them."""
    from edv_ray.methods.edv.records import TrajectoryView
    from edv_ray.methods.edv.stages import distill

    sent = []

    def caller(messages, _schema):
        sent.append(messages[0]["content"])
        return '{"experiences": []}'

    run = TrajectoryView(label="T1", episode_id="e", agent="a", success=True, reward=1.0,
                         transcript="did it")
    distill("task", "policy", [run], caller, sees_reward=True, max_candidates=2, retries=0)
    assert lesson_bounds_text() in sent[0] and '"rule" 8–2000 characters' in sent[0]
    assert "at most 8 tags" in sent[0]
    assert '"content" 8–2000 characters' in lesson_bounds_text("title", "description", "content")


def test_every_prompt_asking_for_a_lesson_states_the_bounds():
    from edv_ray.prompts import load_prompt

    for package, name in (("methods/edv", "distill_graded.v4"), ("methods/edv", "distill_blind.v4"),
                          ("methods/edv", "distill_single_graded.v2"),
                          ("methods/edv", "distill_single_blind.v2"),
                          ("methods", "contamination_twin.v2"),
                          ("methods/reasoning_bank", "rb_extract_success.v2"),
                          ("methods/reasoning_bank", "rb_extract_failure.v2"),
                          ("methods/reasoning_bank", "rb_extract_contrast.v2")):
        assert "Lengths: $lesson_bounds" in load_prompt(package, name).template, name
