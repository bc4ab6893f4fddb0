"""PartitionIndex: ANN (faiss IVF) vs exact search with filters, inserts, persistence."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edv_ray.memory import MemoryBank, MemoryItem, retrieve
from edv_ray.memory.index import PartitionIndex

faiss = pytest.importorskip("faiss")

DIM = 32
DOMAINS = ("retail", "airline", "telecom")


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def clustered(n: int, seed: int = 0, n_topics: int = 40, noise: float = 0.5):
    """Embedding-like data: items around topics; tasks tied to topics; domains by topic."""
    rng = np.random.default_rng(seed)
    topics = unit(rng.standard_normal((n_topics, DIM)))
    topic = rng.integers(0, n_topics, size=n)
    vecs = unit(topics[topic] + noise * rng.standard_normal((n, DIM)) / np.sqrt(DIM))
    domains = [DOMAINS[t % 3] for t in topic.tolist()]
    tasks = [[f"t{t}-{r}"] for t, r in zip(topic.tolist(), rng.integers(0, 5, size=n).tolist())]
    ids = [f"id{i:06d}" for i in range(n)]
    return vecs, ids, domains, tasks, topics


def make_index(n: int, threshold: int, **kw) -> tuple[PartitionIndex, tuple]:
    data = clustered(n, **kw)
    index = PartitionIndex(ann_threshold=threshold)
    index.add_many(*data[:4])
    return index, data


def rows(hits):
    return [r for r, _ in hits]


def test_small_domains_are_exact_and_large_ones_get_their_own_ann_index():
    small, _ = make_index(300, threshold=1000)
    big, (_, _, domains, _, _) = make_index(1200, threshold=300)
    assert not small.uses_ann and big.uses_ann
    big.build()
    assert big.ann_lists().keys() == set(DOMAINS)  # one IVF index per domain
    assert {d: n for d, (n, _) in big.ann_lists().items()} == {
        d: domains.count(d) for d in DOMAINS}


def test_ann_with_all_lists_equals_exact_under_domain_and_task_filters():
    index, (_, _, _, tasks, topics) = make_index(3000, threshold=100)
    index.build()
    index.nprobe = 10**6  # probing every list makes the ANN search exhaustive
    rng = np.random.default_rng(1)
    for qi in range(40):
        q = unit(topics[qi % len(topics)] + 0.3 * rng.standard_normal(DIM) / np.sqrt(DIM))
        ex = {tasks[qi][0], f"t{qi % 40}-1"}
        dom = DOMAINS[qi % 3]
        exact = index.search(q, 5, exclude_task_ids=ex, domain=dom, exact=True)
        ann = index.search(q, 5, exclude_task_ids=ex, domain=dom)
        assert len(exact) == 5
        assert rows(ann) == rows(exact)
        assert [s for _, s in ann] == pytest.approx([s for _, s in exact], abs=1e-6)


def test_ann_filtered_recall_and_filters_hold():
    index, (vecs, _, domains, tasks, _) = make_index(4000, threshold=100, seed=3)
    rng = np.random.default_rng(2)
    found = wanted = 0
    for qi in range(200):
        row = int(rng.integers(0, 4000))
        q = unit(vecs[row] + 0.3 * rng.standard_normal(DIM) / np.sqrt(DIM))
        ex, dom = set(tasks[row]), domains[row]
        exact = index.search(q, 5, exclude_task_ids=ex, domain=dom, exact=True)
        ann = index.search(q, 5, exclude_task_ids=ex, domain=dom)
        assert len(ann) == 5
        for r in rows(ann):
            assert domains[r] == dom and not ex.intersection(tasks[r])
        found += len(set(rows(ann)) & set(rows(exact)))
        wanted += len(exact)
    assert found / wanted >= 0.9


def test_unfiltered_recall_on_random_clustered_data():
    index, (vecs, *_) = make_index(5000, threshold=100, seed=5, n_topics=80)
    rng = np.random.default_rng(4)
    qs = unit(vecs[rng.integers(0, 5000, size=200)] + 0.3 * rng.standard_normal((200, DIM)))
    found = sum(
        len(set(rows(index.search(q, 10))) & set(rows(index.search(q, 10, exact=True))))
        for q in qs
    )
    assert found / (200 * 10) >= 0.9


def test_leave_one_task_out_when_near_neighbours_are_all_excluded():
    rng = np.random.default_rng(7)
    centre = unit(rng.standard_normal(DIM))
    # 400 items of task "hot" right around the query, 1600 others further away
    hot = unit(centre + 0.2 * rng.standard_normal((400, DIM)) / np.sqrt(DIM))
    far = unit(centre + 3.0 * rng.standard_normal((1600, DIM)) / np.sqrt(DIM))
    vecs = np.vstack([hot, far])
    tasks = [["hot"]] * 400 + [[f"o{i % 50}"] for i in range(1600)]
    index = PartitionIndex(ann_threshold=100)
    index.add_many(vecs, [f"id{i:05d}" for i in range(2000)], ["retail"] * 2000, tasks)
    unfiltered = index.search(centre, 5)
    assert all(r < 400 for r in rows(unfiltered))  # the hot task owns the top of the ranking
    exact = index.search(centre, 5, exclude_task_ids={"hot"}, exact=True)
    ann = index.search(centre, 5, exclude_task_ids={"hot"})
    assert len(ann) == 5 and all(r >= 400 for r in rows(ann))
    assert len(set(rows(ann)) & set(rows(exact))) >= 4


def test_very_selective_filter_still_finds_every_allowed_item():
    index, (*_, topics) = make_index(3000, threshold=100)
    rare = unit(np.random.default_rng(9).standard_normal((3, DIM)))
    index.add_many(rare, ["r0", "r1", "r2"], ["rare"] * 3, [["x"], ["y"], ["z"]])
    hits = index.search(topics[0], 5, domain="rare", exclude_task_ids={"z"})
    assert sorted(rows(hits)) == [3000, 3001]
    assert index.search(topics[0], 5, domain="unknown") == []


def test_add_after_build_is_searchable_and_retrains_when_grown():
    index, _ = make_index(1000, threshold=100)
    index.build()
    first = index.ann_lists()
    q = unit(np.random.default_rng(11).standard_normal(DIM))
    index.add(q, "new", "airline", ["tnew"])  # cheap: lands in the exactly-scanned tail
    assert index.ann_lists() == first
    assert rows(index.search(q, 1, domain="airline")) == [1000]
    assert rows(index.search(q, 1, domain="retail")) != [1000]
    assert 1000 not in rows(index.search(q, 3, exclude_task_ids={"tnew"}, domain="airline"))
    more = clustered(1500, seed=12)
    index.add_many(more[0], [f"m{i}" for i in range(1500)], more[2], more[3])
    hits = index.search(q, 1, domain="airline")  # tail > TAIL_ROWS: moved into the index
    assert rows(hits) == [1000] and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    rows_in, lists = index.ann_lists()["airline"]
    assert rows_in == first["airline"][0] + 1 + more[2].count("airline")
    assert lists == first["airline"][1]
    index.add_many(more[0], [f"n{i}" for i in range(1500)], more[2], more[3])
    index.add_many(more[0], [f"o{i}" for i in range(1500)], more[2], more[3])
    assert rows(index.search(q, 1, domain="airline")) == [1000]
    rows_in, lists = index.ann_lists()["airline"]
    assert rows_in == first["airline"][0] + 1 + 3 * more[2].count("airline")
    assert lists > first["airline"][1]  # retrained at 4x


def test_ties_break_on_item_id_in_both_paths_and_tau_applies():
    index, _ = make_index(2000, threshold=100)
    e0 = np.zeros(DIM, dtype=np.float32)
    e0[0] = 1.0  # one-hot: every copy scores exactly 1.0, whatever the summation order
    index.add_many(np.stack([e0] * 4), ["zz", "aa", "mm", "bb"], ["retail"] * 4, [["a"]] * 4)
    for exact in (True, False):
        hits = index.search(e0, 3, exact=exact)
        assert [index._ids[r] for r in rows(hits)] == ["aa", "bb", "mm"]
        assert [s for _, s in hits] == [1.0, 1.0, 1.0]
        assert index.search(e0, 5, tau=1.5, exact=exact) == []


def test_merged_provenance_is_excluded_too():
    index, (vecs, *_r) = make_index(2000, threshold=100)
    assert 0 in rows(index.search(vecs[0], 1))
    index.add_tasks(0, ["late-task"])
    for exact in (True, False):
        assert 0 not in rows(index.search(vecs[0], 5, exclude_task_ids={"late-task"}, exact=exact))


def test_concurrent_adds_and_searches_stay_consistent():
    index, (_, _, domains, _, topics) = make_index(2000, threshold=500)
    errors: list[Exception] = []
    extra = clustered(3000, seed=21)

    def writer():
        try:
            for lo in range(0, 3000, 100):
                sl = slice(lo, lo + 100)
                index.add_many(extra[0][sl], [f"w{i}" for i in range(lo, lo + 100)],
                               extra[2][sl], extra[3][sl])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    while t.is_alive():
        for r in rows(index.search(topics[1], 5, domain="airline", exclude_task_ids={"t1-0"})):
            dom = domains[r] if r < 2000 else extra[2][r - 2000]
            assert dom == "airline"
    t.join()
    assert not errors and len(index) == 5000


# ---------------------------------------------------------------------- through MemoryBank
def bank_items(n: int, seed: int = 0) -> list[MemoryItem]:
    vecs, _, domains, tasks, _ = clustered(n, seed=seed, noise=1.0)  # no near-duplicates
    out = []
    for i in range(n):
        shared = i % 4 != 0
        out.append(MemoryItem(
            bank="shared" if shared else "private", owner=None if shared else "agent_a",
            title=f"Experience {i}", when_to_use="Always.", rule=f"Rule number {i}.",
            domain=domains[i], source_task_ids=tasks[i], embedding=vecs[i].tolist(),
        ))
    return out


@pytest.fixture(scope="module")
def items() -> list[MemoryItem]:
    return bank_items(1600)


def _queries(items: list[MemoryItem], count: int = 30):
    rng = np.random.default_rng(5)
    for i in rng.integers(0, len(items), size=count).tolist():
        it = items[i]
        q = unit(np.asarray(it.embedding) + 0.2 * rng.standard_normal(DIM) / np.sqrt(DIM))
        yield q, set(it.source_task_ids), it.domain


def _ids(hits):
    return [(h.bank, h.item.item_id) for h in hits]


def test_bank_retrieve_ann_agrees_with_exact(items):
    exact_bank, ann_bank = MemoryBank(), MemoryBank(ann_threshold=200)
    assert len(exact_bank.add(items).added) == len(ann_bank.add(items).added) == 1600
    agree = total = 0
    for q, ex, dom in _queries(items):
        kw = {"query_embedding": q, "solver": "agent_a", "k": 5, "tau": 0.0,
              "exclude_task_ids": ex, "domain": dom}
        a, e = retrieve(ann_bank, **kw), retrieve(exact_bank, **kw)
        assert len(a) == len(e) == 5
        assert [h.bank for h in a] == sorted(h.bank for h in a)[::-1]  # shared before private
        for h in a:
            assert h.item.domain == dom and not ex.intersection(h.item.source_task_ids)
        agree += len(set(_ids(a)) & set(_ids(e)))
        total += 5
    assert agree / total >= 0.9
    assert ann_bank._parts[("shared", None)].index.ann_lists()  # the ANN path ran


def test_bank_save_load_rebuilds_the_index(tmp_path, items):
    bank = MemoryBank(tmp_path / "memory", ann_threshold=200)
    bank.add(items)
    bank.save()
    loaded = MemoryBank.load(tmp_path / "memory", ann_threshold=200)
    exact = MemoryBank.load(tmp_path / "memory")  # default threshold: exact search
    assert len(loaded) == len(exact) == 1600
    part = loaded._parts[("shared", None)]
    assert not part.index.ann_lists() and part.index.uses_ann  # built lazily, on first search
    assert not exact._parts[("shared", None)].index.uses_ann
    agree = total = 0
    for q, ex, dom in _queries(items, 20):
        kw = {"query_embedding": q, "solver": "agent_a", "k": 4, "tau": 0.1,
              "exclude_task_ids": ex, "domain": dom}
        got, want = _ids(retrieve(loaded, **kw)), _ids(retrieve(exact, **kw))
        assert len(got) == len(want)
        agree += len(set(got) & set(want))
        total += len(want)
    assert agree / total >= 0.9
    assert sum(n for n, _ in part.index.ann_lists().values()) == len(part.items)
    vec = unit(np.random.default_rng(13).standard_normal(DIM))
    new = MemoryItem.model_validate(
        items[1].model_dump() | {"item_id": "", "rule": "Brand new.", "embedding": vec.tolist()}
    )
    assert loaded.add([new]).added == [new.item_id]  # the rebuilt index takes new items
    assert retrieve(loaded, query_embedding=vec, k=1, tau=0.0)[0].item.item_id == new.item_id


def test_bank_merge_extends_the_task_filter_on_the_ann_path(items):
    bank = MemoryBank(ann_threshold=200)
    bank.add(items)
    target = items[1]  # a shared item
    twin = MemoryItem.model_validate(
        target.model_dump() | {"item_id": "", "source_task_ids": ["merged-task"]}
    )
    res = bank.add([twin])
    assert res.merged == [(twin.item_id, target.item_id)]
    q = np.asarray(target.embedding, dtype=np.float32)
    hits = retrieve(bank, query_embedding=q, k=1, tau=0.0)
    assert hits[0].item.item_id == target.item_id
    hits = retrieve(bank, query_embedding=q, k=3, tau=0.0, exclude_task_ids={"merged-task"})
    assert target.item_id not in [h.item.item_id for h in hits] and len(hits) == 3
