"""The engine's hidden marks and seeded draws (pure functions, no server)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from edv_ray.config import ConfigError, load_config_dict
from edv_ray.prompts import fence
from edv_ray.report.memory_audit import RubricAnswer
from edv_ray.simulation.codec import Codec, uniform
from edv_ray.simulation.prompt_read import experience_items
from edv_ray.simulation.schema_fill import fill
from edv_ray.simulation.server import parse_tag


def test_tags_round_trip_only_under_their_secret_and_survive_fencing():
    codec = Codec("s1")
    tag = codec.item_tag(True, "airline/airline", "glm", "n1")
    text = fence(f"Always confirm <the booking> & dates. {tag}")
    truth = codec.item_truth(text)
    assert truth is not None and truth.correct
    assert truth.type_hash == codec.h16("airline/airline") and truth.writer_hash == codec.h16("glm")
    assert not codec.item_truth(codec.item_tag(False, "a/a", "x", "n2")).correct
    assert Codec("s2").item_truth(text) is None  # another secret: undecodable
    forged = tag[:-2] + ("c" if tag[-2] == "b" else "b") + "]"  # one nibble changed
    assert codec.item_truth(forged) is None  # tampered: undecodable
    assert codec.item_truth("a rule with no tag") is None
    mark = codec.marker(False, "glm", "e1")
    assert codec.run_mark(f"agent: sorry {mark}").success is False
    assert codec.item_truth(mark) is None and codec.run_mark(tag) is None  # kinds kept apart


def test_draws_are_stable_and_spread():
    assert uniform(1, "a", "x") == uniform(1, "a", "x")
    draws = [uniform(0, "e", i) for i in range(2000)]
    assert len(set(draws)) == 2000 and 0.45 < sum(draws) / 2000 < 0.55


def test_experience_items_are_split_by_their_numbering():
    from edv_ray.agents.strategies import get_strategy, render_system_prompt

    items = ["### A\nRule: step 1. then 2. done", "### B\nRule: x", "### C\n2. not a new item"]
    system = render_system_prompt(get_strategy("text_tools"), "policy", [], items)
    got = experience_items(system)
    assert len(got) == 3 and got[0].startswith("1. ### A") and "not a new item" in got[2]
    assert experience_items(render_system_prompt(get_strategy("text_tools"), "p", [], [])) == []


def test_tags_with_a_pipe_in_the_task_id():
    tag = parse_tag("edv|agent|a|telecom|[x]y|z[PERSONA:None]|2|execute-e0-telecom-x-t2-a-123")
    assert tag["task_id"] == "[x]y|z[PERSONA:None]" and tag["trial"] == "2" and tag["agent"] == "a"
    assert parse_tag("not ours") == {} and parse_tag(None) == {}


class Bounded(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(gt=2, lt=5)
    x: float = Field(ge=0.5, le=0.6)
    maybe: list[int] | None = None


def test_schema_fill_validates_for_nested_and_bounded_schemas():
    from edv_ray.methods.answers import decoding_schema

    for model in (RubricAnswer, Bounded):
        for k in range(20):
            model.model_validate(fill(decoding_schema(model), ["word"], f"k{k}"))
    rubric = fill(decoding_schema(RubricAnswer), ["w"], "k")
    assert all(isinstance(v["score"], int) for v in rubric.values())  # strict ints


def test_profile_is_validated_with_the_run_config():
    base = {"models": {"sim": {"engine": "simulated"}}, "agents": [{"name": "a", "model": "sim"}]}
    cfg = load_config_dict(base)
    assert cfg.models["sim"].simulation.default_agent is not None  # `engine: simulated` alone
    bad = {**base, "models": {"sim": {"engine": "simulated",
                                      "simulation": {"agents": {"a": {"success": {"x": 1.5}}}}}}}
    with pytest.raises(ConfigError, match="success probabilities"):
        load_config_dict(bad)
    with pytest.raises(ConfigError, match="only applies to engine=simulated"):
        load_config_dict({**base, "models": {"sim": {"engine": "llama_cpp", "weights": "w",
                                                     "simulation": {}}}})
    with pytest.raises(ConfigError, match="unknown field"):
        load_config_dict({**base, "models": {"sim": {"engine": "simulated",
                                                     "simulation": {"verify": {"aprove": 1}}}}})
