"""retrieve(): shared first, private fill, tau, k, owner isolation, leave-one-task-out."""

from __future__ import annotations

import numpy as np
import pytest

from edv_ray.memory import MemoryBank, retrieve

QUERY = "I want to exchange the items in my delivered order"

E = {
    "exchange": ("Check delivery before exchange", "A user asks to exchange items of an order.",
                 "Check that the order status is delivered before offering an exchange of items."),
    "once": ("Exchange only once", "A user wants to exchange items.",
             ("An order can be exchanged only once; collect all items to exchange before calling "
              "exchange_delivered_order_items.")),
    "same": ("Same product type on exchange", "A user exchanges an item for another variant.",
             ("The new item must be the same product type, only a different option such as size "
              "or color.")),
    "pay": ("Price difference on exchange", "An exchange changes the price.",
            "Charge or refund the price difference of an exchange to one payment method on file."),
    "refund": ("Refund to original payment", "A user asks for a refund on a cancelled order.",
               "Refunds go to the original payment method unless the user has a gift card."),
    "identity": ("Verify identity first", "Any request that touches a user's account.",
                 ("Authenticate the user by email or name plus zip code before looking up or "
                  "changing anything.")),
    "cancel": ("Confirm before cancelling", "A user asks to cancel a reservation.",
               ("Read back the reservation id and get an explicit yes from the user before "
                "calling cancel_reservation.")),
    "baggage": ("Baggage allowance by tier", "A passenger asks about checked bags.",
                "Gold members get 3 free checked bags; silver 2; regular 1 on economy."),
    "b_best": ("Exchange items of a delivered order", QUERY,
               "Exchange the items in the delivered order with exchange_delivered_order_items."),
}


@pytest.fixture(scope="module")
def _item(new_item):
    """_item(key, task, **kw): an un-embedded item of experience E[key] from one task."""

    def _make(key, task, **kw):
        title, when, rule = E[key]
        kw.setdefault("domain", "retail")
        return new_item(rule, title=title, when_to_use=when, source_task_ids=[task], **kw)

    return _make


@pytest.fixture(scope="module")
def pool(embedder, _item) -> MemoryBank:
    """Read-only bank shared by the tests of this module (embedded in one batch by add)."""
    bank = MemoryBank(embedder=embedder)
    res = bank.add([
        _item("exchange", "t2"),
        _item("same", "t3"),
        _item("identity", "t4"),
        _item("cancel", "t1", domain="airline"),
        _item("baggage", "t5", domain="airline"),
        _item("once", "t6", bank="private", owner="agent_a"),
        _item("refund", "t7", bank="private", owner="agent_a"),
        _item("pay", "t8", bank="private", owner="agent_b"),
        _item("b_best", "t9", bank="private", owner="agent_b"),
    ])
    assert len(res.added) == 9  # no accidental merges among the fixtures
    return bank


def titles(results):
    return [r.item.title for r in results]


def test_shared_first_then_private_fill(pool):
    out = retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.3)
    assert [r.bank for r in out] == ["shared", "shared", "private"]
    assert titles(out) == [E["exchange"][0], E["same"][0], E["once"][0]]
    # the private item scores best overall, yet shared items come first
    assert out[2].score > out[0].score > out[1].score >= 0.3
    assert out[2].item.owner == "agent_a"


def test_k_is_respected_and_shared_wins_when_enough_pass(pool):
    one = retrieve(pool, QUERY, solver="agent_a", k=1, tau=0.3)
    assert titles(one) == [E["exchange"][0]] and one[0].bank == "shared"
    assert retrieve(pool, QUERY, solver="agent_a", k=0) == []
    assert len(retrieve(pool, QUERY, solver="agent_a", k=50, tau=-1.0)) == 7  # 5 shared + 2 own


def test_tau_is_respected(pool, embedder):
    q = embedder.embed_one(QUERY)
    for tau in (0.0, 0.3, 0.4, 0.55, 0.9):
        out = retrieve(pool, query_embedding=q, solver="agent_a", k=10, tau=tau)
        allowed = pool.items(bank="shared") + pool.items(bank="private", owner="agent_a")
        expected = {it.item_id for it in allowed if float(np.dot(it.embedding, q)) >= tau}
        assert {r.item.item_id for r in out} == expected
        assert all(r.score >= tau for r in out)
    assert titles(retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.4)) == [
        E["exchange"][0], E["once"][0]
    ]
    assert retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.9) == []


def test_private_fill_is_sorted_by_score(pool):
    out = retrieve(pool, QUERY, solver="agent_a", k=10, tau=-1.0)
    for bank in ("shared", "private"):
        scores = [r.score for r in out if r.bank == bank]
        assert scores == sorted(scores, reverse=True) and scores


def test_other_agents_private_items_are_never_returned(pool):
    b_ids = {it.item_id for it in pool.items(bank="private", owner="agent_b")}
    for solver in ("agent_a", "agent_c", None):
        out = retrieve(pool, QUERY, solver=solver, k=50, tau=-1.0)
        assert not b_ids & {r.item.item_id for r in out}
    assert all(r.bank == "shared" for r in retrieve(pool, QUERY, solver=None, k=50, tau=-1.0))
    own = retrieve(pool, QUERY, solver="agent_b", k=3, tau=0.3)
    assert titles(own) == [E["exchange"][0], E["same"][0], E["b_best"][0]]
    # its best item beats anything agent_a may see, yet agent_a never gets it
    seen_by_a = retrieve(pool, QUERY, solver="agent_a", k=50, tau=-1.0)
    assert own[2].score > max(r.score for r in seen_by_a)


def test_leave_one_task_out(pool):
    out = retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.3, exclude_task_ids={"t2"})
    assert titles(out) == [E["same"][0], E["once"][0]]
    out = retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.3, exclude_task_ids=["t2", "t6"])
    assert titles(out) == [E["same"][0]]


def test_excluded_top_items_do_not_crowd_out_allowed_ones(bank, make_item, _item):
    bank.add([
        _item("exchange", "hot"),
        _item("once", "hot"),
        _item("same", "hot"),
        _item("pay", "t9"),
        _item("refund", "t10"),
        _item("identity", "t11"),
    ])
    top = retrieve(bank, QUERY, k=2, tau=0.2)
    assert all(r.item.source_task_ids == ["hot"] for r in top)  # premise: "hot" wins unfiltered
    out = retrieve(bank, QUERY, k=2, tau=0.2, exclude_task_ids={"hot"})
    assert titles(out) == [E["pay"][0], E["refund"][0]]
    # an item merged from several tasks is excluded if any of them is held out
    _title, when, rule = E["pay"]
    res = bank.add([make_item(rule, title="Same rule, other task", when_to_use=when,
                              source_task_ids=["hot"], domain="retail")])
    assert len(res.merged) == 1
    out = retrieve(bank, QUERY, k=2, tau=0.2, exclude_task_ids={"hot"})
    assert titles(out) == [E["refund"][0]]


def test_domain_filter(pool):
    out = retrieve(pool, QUERY, solver="agent_a", k=10, tau=-1.0, domain="airline")
    assert sorted(titles(out)) == sorted([E["cancel"][0], E["baggage"][0]])
    out = retrieve(pool, QUERY, solver="agent_a", k=10, tau=-1.0, domain="retail")
    assert E["cancel"][0] not in titles(out) and len(out) == 5


def test_query_embedding_matches_query_text(pool, embedder):
    by_text = retrieve(pool, QUERY, solver="agent_a", k=3, tau=0.3)
    raw = embedder.embed_one(QUERY) * 7.0  # not normalised: retrieve normalises it
    by_vec = retrieve(pool, query_embedding=raw.tolist(), solver="agent_a", k=3, tau=0.3)
    assert [r.item.item_id for r in by_vec] == [r.item.item_id for r in by_text]
    assert np.allclose([r.score for r in by_vec], [r.score for r in by_text], atol=1e-5)


def test_bad_arguments(pool, embedder):
    with pytest.raises(ValueError, match="exactly one"):
        retrieve(pool)
    with pytest.raises(ValueError, match="exactly one"):
        retrieve(pool, QUERY, query_embedding=embedder.embed_one(QUERY))
    with pytest.raises(ValueError, match="384"):
        retrieve(pool, query_embedding=[1.0, 0.0])
    with pytest.raises(ValueError, match="k must be"):
        retrieve(pool, QUERY, k=-1)
    assert retrieve(MemoryBank(), QUERY) == []  # empty bank: no model load, no error


def test_retrieval_scope_shared_or_private_only(pool):
    """The paper's memory-hierarchy ablation: shared bank only, or the solver's private
    bank only (edv.retrieval_scope)."""
    shared = retrieve(pool, QUERY, solver="agent_a", k=3, tau=-1.0, scope="shared")
    assert {r.bank for r in shared} == {"shared"} and len(shared) == 3
    private = retrieve(pool, QUERY, solver="agent_a", k=3, tau=-1.0, scope="private")
    assert {(r.bank, r.item.owner) for r in private} == {("private", "agent_a")}
    assert len(private) == 2  # agent_a's two private items, never agent_b's
    with pytest.raises(ValueError, match="scope"):
        retrieve(pool, QUERY, solver="agent_a", scope="everything")
