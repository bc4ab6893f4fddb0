"""MemoryBank: exact/near de-duplication, provenance union, idempotent re-adds, persistence."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from edv_ray.memory import MemoryBank, Vote, partition_path

CANCEL = {
    "title": "Confirm before cancelling",
    "when_to_use": "A user asks to cancel a reservation.",
    "rule": "Read back the reservation id and get an explicit yes from the user before calling "
    "cancel_reservation.",
}
CANCEL_PARAPHRASE = {
    "title": "Get confirmation before cancelling",
    "when_to_use": "The user wants to cancel a reservation.",
    "rule": "Before calling cancel_reservation, read the reservation id back to the user and get "
    "an explicit yes.",
}
EXCHANGE = {
    "title": "Check delivery before exchange",
    "when_to_use": "A user asks to exchange items of an order.",
    "rule": "Check that the order status is delivered before offering an exchange of items.",
}
IDENTITY = {
    "title": "Verify identity first",
    "when_to_use": "Any request that touches a user's account.",
    "rule": "Authenticate the user by email or name plus zip code before looking up or changing "
    "anything.",
}


def test_exact_duplicate_merges_even_with_different_title(bank, make_item):
    a = make_item(**CANCEL, source_task_ids=["t1"])
    b = make_item(
        **{**CANCEL, "title": "A different title", "rule": "  " + CANCEL["rule"].upper() + "!"},
        source_task_ids=["t2"],
    )
    res = bank.add([a, b])
    assert res.added == [a.item_id]
    assert res.merged == [(b.item_id, a.item_id)]
    assert len(bank) == 1
    kept = bank.get(a.item_id)
    assert kept.merged_count == 1 and kept.title == CANCEL["title"]
    assert bank.get(b.item_id) is kept  # the absorbed id resolves to the kept item


def test_paraphrases_merge_unrelated_rules_do_not(bank, make_item, embedder):
    items = [make_item(**CANCEL), make_item(**CANCEL_PARAPHRASE), make_item(**EXCHANGE),
             make_item(**IDENTITY)]
    cos = np.asarray(items[0].embedding) @ np.asarray(items[1].embedding)
    assert cos >= bank.dedup_threshold  # the premise of this test
    res = bank.add(items)
    assert res.merged == [(items[1].item_id, items[0].item_id)]
    assert res.added == [items[0].item_id, items[2].item_id, items[3].item_id]
    assert sorted(it.title for it in bank.items()) == sorted(
        [CANCEL["title"], EXCHANGE["title"], IDENTITY["title"]]
    )


def test_threshold_is_honoured(tmp_path, make_item, embedder):
    strict = MemoryBank(tmp_path, dedup_threshold=0.999, embedder=embedder)
    res = strict.add([make_item(**CANCEL), make_item(**CANCEL_PARAPHRASE)])
    assert len(res.added) == 2 and not res.merged


def test_no_merge_across_bank_owner_or_domain(bank, make_item):
    items = [
        make_item(**CANCEL, domain="airline"),
        make_item(**CANCEL, bank="private", owner="agent_a", domain="airline"),
        make_item(**CANCEL, bank="private", owner="agent_b", domain="airline"),
        make_item(**CANCEL, domain="retail"),
    ]
    res = bank.add(items)
    assert len(res.added) == 4 and not res.merged
    assert bank.owners() == ["agent_a", "agent_b"]
    assert len(bank.items(bank="private", owner="agent_a")) == 1
    assert len(bank.items(bank="shared")) == 2


def test_merge_keeps_union_of_provenance(bank, make_item):
    va = Vote(verifier="agent_a", approve=True, rationale="matches my run")
    vb = Vote(verifier="agent_b", approve=True, rationale="saw the same failure")
    first = make_item(
        **CANCEL, source_task_ids=["t1"], supporting_trajectory_ids=["tr1"],
        rejected_trajectory_ids=["tr2"], votes=[va, vb], tags=["cancel"], epoch=0,
    )
    second = make_item(
        **CANCEL_PARAPHRASE, source_task_ids=["t7"], supporting_trajectory_ids=["tr9"],
        rejected_trajectory_ids=["tr2", "tr10"], votes=[va], tags=["airline"], epoch=1,
    )
    third = make_item(**CANCEL, source_task_ids=["t8", "t1"], votes=[vb], epoch=2)
    bank.add([first])
    bank.add([second])
    bank.add([third])
    assert len(bank) == 1
    kept = bank.items()[0]
    assert kept.item_id == first.item_id and kept.epoch == 0 and kept.rule == CANCEL["rule"]
    assert kept.source_task_ids == ["t1", "t7", "t8"]
    assert kept.supporting_trajectory_ids == ["tr1", "tr9"]
    assert kept.rejected_trajectory_ids == ["tr2", "tr10"]
    assert kept.votes == [va, vb]
    assert kept.tags == ["cancel", "airline"]
    assert kept.merged_count == 2
    assert kept.merged_item_ids == [second.item_id, third.item_id]


def test_re_adding_is_a_no_op(bank, make_item):
    a, b = make_item(**CANCEL, source_task_ids=["t1"]), make_item(**CANCEL_PARAPHRASE)
    bank.add([a, b])
    before = [it.model_dump() for it in bank.items()]
    res = bank.add([a, b])  # a resumed stage re-derives the same items
    assert res.skipped == [a.item_id, b.item_id] and not res.added and not res.merged
    assert [it.model_dump() for it in bank.items()] == before
    assert bank.items()[0].merged_count == 1


def test_items_without_embedding_are_embedded(bank, make_item, embedder):
    item = make_item(**EXCHANGE).model_copy(update={"embedding": []})
    bank.add([item])
    stored = bank.get(item.item_id)
    assert len(stored.embedding) == 384
    expected = embedder.embed_one(item.text)
    assert np.allclose(stored.embedding, expected, atol=1e-5)


def test_embedding_dimension_mismatch_is_rejected(bank, make_item):
    bank.add([make_item(**CANCEL)])
    bad = make_item(**EXCHANGE).model_copy(update={"embedding": [1.0, 0.0, 0.0]})
    good = make_item(**IDENTITY)
    with pytest.raises(ValueError, match=r"\[3, 384\] dimensions"):
        bank.add([good, bad])
    assert len(bank) == 1 and good.item_id not in bank  # the batch was rejected as a whole


def test_save_load_round_trip_and_duckdb(bank, make_item, tmp_path):
    va = Vote(verifier="agent_a", approve=True, rationale="ok")
    bank.add([
        make_item(**CANCEL, source_task_ids=["t1"], votes=[va], domain="airline"),
        make_item(**CANCEL_PARAPHRASE, source_task_ids=["t2"], domain="airline"),
        make_item(**EXCHANGE, bank="private", owner="agent_a", domain="retail"),
        make_item(**IDENTITY, bank="private", owner="agent_b", domain="retail"),
    ])
    written = bank.save()
    root = tmp_path / "memory"
    assert sorted(written) == sorted([
        partition_path(root, "shared", None),
        partition_path(root, "private", "agent_a"),
        partition_path(root, "private", "agent_b"),
    ])
    assert not [p for p in root.rglob("*") if p.name.startswith(".")]  # no temp files left

    loaded = MemoryBank.load(root)
    assert len(loaded) == 3 and loaded.owners() == ["agent_a", "agent_b"]
    for orig, back in zip(bank.items(), loaded.items(), strict=True):
        assert back.model_dump(exclude={"embedding"}) == orig.model_dump(exclude={"embedding"})
        assert np.allclose(back.embedding, orig.embedding, atol=1e-6)
    # absorbed ids survive the round trip, so a resumed run's re-add is still a no-op
    res = loaded.add([make_item(**CANCEL_PARAPHRASE, source_task_ids=["t2"], domain="airline")])
    assert res.skipped and loaded.items(bank="shared")[0].merged_count == 1

    rows = duckdb.sql(
        f"SELECT bank, owner, count(*) AS n, sum(merged_count) AS m, "
        f"any_value(len(embedding)) AS d "
        f"FROM read_parquet('{root}/**/*.parquet', hive_partitioning=true, union_by_name=true) "
        f"GROUP BY ALL ORDER BY bank, owner NULLS FIRST"
    ).fetchall()
    assert rows == [("private", "agent_a", 1, 0, 384), ("private", "agent_b", 1, 0, 384),
                    ("shared", None, 1, 1, 384)]
    votes = duckdb.sql(
        f"SELECT v.verifier, v.approve FROM (SELECT unnest(votes) AS v FROM read_parquet("
        f"'{root}/**/*.parquet', hive_partitioning=true) WHERE owner IS NULL)"
    ).fetchall()
    assert votes == [("agent_a", True)]


def test_save_only_rewrites_changed_partitions(bank, make_item, tmp_path):
    bank.add([make_item(**CANCEL), make_item(**EXCHANGE, bank="private", owner="agent_a")])
    bank.save()
    assert bank.save() == [partition_path(tmp_path / "memory", "shared", None)]
    bank.add([make_item(**IDENTITY, bank="private", owner="agent_b")])
    assert set(bank.save()) == {
        partition_path(tmp_path / "memory", "private", "agent_b"),
        partition_path(tmp_path / "memory", "shared", None),
    }
    assert len(MemoryBank.load(tmp_path / "memory")) == 3


def test_empty_bank_saves_a_typed_shared_table(tmp_path):
    root = tmp_path / "empty"
    MemoryBank(root).save()
    assert len(MemoryBank.load(root)) == 0
    cols = duckdb.sql(
        f"DESCRIBE SELECT * FROM read_parquet('{root}/**/*.parquet', hive_partitioning=true)"
    ).fetchall()
    assert ("embedding", "FLOAT[]") in [(c[0], c[1]) for c in cols]


def test_missing_root_loads_empty_and_save_needs_root(tmp_path):
    assert len(MemoryBank.load(tmp_path / "nowhere")) == 0
    with pytest.raises(ValueError, match="no root"):
        MemoryBank().save()
