"""Experience / MemoryItem validation, stable ids, merge semantics and the bank schema."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pydantic import ValidationError

from edv_ray.memory import BANK_SCHEMA, Experience, MemoryItem, Vote, make_item_id
from edv_ray.memory.records import merge_items, normalise_text

EXP = Experience(
    title="Confirm before cancelling",
    when_to_use="A user asks to cancel a reservation.",
    rule="Read back the reservation id and get an explicit yes before calling cancel.",
    tags=["airline", "cancel", "airline"],
)


def test_experience_is_strict_and_renders_all_fields():
    assert EXP.tags == ["airline", "cancel"]  # duplicates dropped, order kept
    text = EXP.render()
    assert "Confirm before cancelling" in text
    assert "When to use: A user asks to cancel a reservation." in text
    assert "Rule: Read back the reservation id" in text
    assert "Tags: airline, cancel" in text
    with pytest.raises(ValidationError):
        Experience(title="t", when_to_use="w", rule="   ")
    with pytest.raises(ValidationError):
        Experience(title="t", when_to_use="w", rule="r", description="not in the schema")
    with pytest.raises(ValidationError):
        Experience(title="t", rule="r")  # when_to_use missing


def test_item_bank_owner_rules():
    with pytest.raises(ValidationError, match="shared items have no owner"):
        MemoryItem.from_experience(EXP, bank="shared", owner="agent_a")
    with pytest.raises(ValidationError, match="private items need an owner"):
        MemoryItem.from_experience(EXP, bank="private")
    with pytest.raises(ValidationError, match="not a valid agent name"):
        MemoryItem.from_experience(EXP, bank="private", owner="../escape")
    with pytest.raises(ValidationError):
        MemoryItem.from_experience(EXP, bank="public")
    item = MemoryItem.from_experience(EXP, bank="private", owner="agent_a", domain="airline")
    assert item.text == EXP.render()
    assert item.experience == EXP
    assert item.created_at.tzinfo is not None


def test_item_id_is_stable_and_content_addressed():
    a = MemoryItem.from_experience(EXP, bank="shared", source_task_ids=["t1", "t2"], epoch=1)
    b = MemoryItem.from_experience(EXP, bank="shared", source_task_ids=["t2", "t1"], epoch=1)
    assert a.item_id == b.item_id  # order of source tasks does not matter
    assert a.item_id == make_item_id("shared", None, EXP, ["t1", "t2"], 1)
    shouty = EXP.model_copy(update={"rule": "  " + EXP.rule.upper() + "  "})
    assert make_item_id("shared", None, shouty, ["t1", "t2"], 1) == a.item_id
    others = {
        MemoryItem.from_experience(EXP, bank="shared", source_task_ids=["t3"], epoch=1).item_id,
        MemoryItem.from_experience(
            EXP, bank="shared", source_task_ids=["t1", "t2"], epoch=2
        ).item_id,
        MemoryItem.from_experience(
            EXP, bank="shared", source_task_ids=["t1", "t2"], epoch=1, domain="retail"
        ).item_id,
        MemoryItem.from_experience(
            EXP, bank="private", owner="a", source_task_ids=["t1", "t2"], epoch=1
        ).item_id,
        MemoryItem.from_experience(
            EXP, bank="private", owner="b", source_task_ids=["t1", "t2"], epoch=1
        ).item_id,
    }
    assert a.item_id not in others and len(others) == 5


def test_normalise_text():
    assert normalise_text("  Always   CONFIRM\n the id. ") == "always confirm the id"
    assert normalise_text("Rule!") == normalise_text("rule")


def test_merge_items_unions_provenance():
    v1 = Vote(verifier="a", approve=True, rationale="worked for me")
    v2 = Vote(verifier="b", approve=True, rationale="also")
    keep = MemoryItem.from_experience(
        EXP, bank="shared", source_task_ids=["t1"], supporting_trajectory_ids=["s1"],
        rejected_trajectory_ids=["r1"], votes=[v1], embedding=[1.0, 0.0],
    )
    other = MemoryItem.from_experience(
        EXP.model_copy(update={"tags": ["refund"]}), bank="shared", source_task_ids=["t2", "t1"],
        supporting_trajectory_ids=["s2"], rejected_trajectory_ids=["r1", "r2"],
        votes=[v1, v2], merged_count=2, merged_item_ids=["old"], embedding=[0.0, 1.0],
    )
    merged = merge_items(keep, other)
    assert merged.item_id == keep.item_id
    assert merged.embedding == [1.0, 0.0] and merged.text == keep.text
    assert merged.source_task_ids == ["t1", "t2"]
    assert merged.supporting_trajectory_ids == ["s1", "s2"]
    assert merged.rejected_trajectory_ids == ["r1", "r2"]
    assert merged.votes == [v1, v2]
    assert merged.tags == ["airline", "cancel", "refund"]
    assert merged.merged_count == 3  # other itself + the 2 it had absorbed
    assert merged.merged_item_ids == [other.item_id, "old"]
    assert keep.merged_count == 0  # inputs are not mutated


def test_bank_schema_round_trips_an_item():
    item = MemoryItem.from_experience(
        EXP, bank="private", owner="agent_a", embedding=[0.5, -0.25], domain="retail",
        source_task_ids=["t9"], epoch=3, distiller="agent_c",
        votes=[Vote(verifier="agent_a", approve=True, rationale="ok")],
        created_at=dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc),
    )
    table = pa.Table.from_pylist([item.to_row()], schema=BANK_SCHEMA)
    assert table.schema.equals(BANK_SCHEMA)
    assert table.schema.field("embedding").type == pa.list_(pa.float32())
    back = MemoryItem.from_row(table.to_pylist()[0])
    assert back == item
