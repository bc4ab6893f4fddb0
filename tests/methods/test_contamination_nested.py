"""Contamination across shares and solvers (issue 29 item 8): the hosts of a larger share
contain those of a smaller one (so its twins do too), drawn per bank; and the share is
counted per solver over what it reads — EDV's shared bank plus its own private bank —
not pooled over private banks it never reads."""

from __future__ import annotations

from collections import Counter

import pytest

from edv_ray.config import dump_config, load_config_dict
from edv_ray.memory import MemoryBank, MemoryItem
from edv_ray.methods import contamination as C
from edv_ray.results.views import connect
from tests.methods.test_contamination import contaminator
from tests.methods.test_methods import config, run

SHARES = (0.05, 0.1, 0.2, 0.5, 0.8)


def _clean() -> dict[str, list[C.Host]]:
    """mock: 40 shared items, 15 of a's private bank, 7 of b's; airline: 3 shared items."""
    def host(d, i, owner):
        return C.Host(d, f"{d}-{owner or 'shared'}-{i}", f"t{i}", f"title {i}", f"when {i}",
                      f"rule {i}", where={"owner": owner})
    return {"mock": [host("mock", i, None) for i in range(40)]
            + [host("mock", i, "a") for i in range(15)] + [host("mock", i, "b") for i in range(7)],
            "airline": [host("airline", i, None) for i in range(3)]}


def _twin_keys(hosts: dict[str, list[C.Host]]) -> set[tuple[str, int]]:
    """(host, copy) as the twin writer numbers them: the k-th use of a host, its k-th twin."""
    keys, seen = set(), Counter()
    for hs in hosts.values():
        for h in hs:
            keys.add((h.item_id, seen[h.item_id]))
            seen[h.item_id] += 1
    return keys


def test_hosts_and_twins_nest_across_shares():
    clean = _clean()
    picks = {s: C.pick_hosts(clean, s, seed=7, method="edv") for s in SHARES}
    for small, large in zip(SHARES, SHARES[1:]):
        for d in clean:
            assert not Counter(h.item_id for h in picks[small][d]) - Counter(
                h.item_id for h in picks[large][d]), (d, small, large)
        assert _twin_keys(picks[small]) <= _twin_keys(picks[large])
    for s, hosts in picks.items():  # per bank: its own share of hosts, from itself only
        for owner, n in ((None, 40), ("a", 15), ("b", 7)):
            mine = [h for h in hosts["mock"] if h.where["owner"] == owner]
            assert len(mine) == C.n_poison(n, s) and len({h.item_id for h in mine}) == min(n, len(mine))
    assert len(picks[0.8]["airline"]) == 12  # 4 twins per item: every item used equally
    assert set(Counter(h.item_id for h in picks[0.8]["airline"]).values()) == {4}


def _placed(hosts: dict[str, list[C.Host]]) -> list[dict]:
    return [dict(domain=h.domain, bank="private" if h.where["owner"] else "shared",
                 owner=h.where["owner"], item_id=f"tw-{i}", source="model")
            for i, h in enumerate(h for hs in hosts.values() for h in hs)]


def test_exposure_is_counted_per_solver_over_the_banks_it_reads():
    clean = _clean()
    rows = C.exposure_rows("r", "edv", 0.1, clean, _placed(C.pick_hosts(clean, 0.1, 7, "edv")),
                           ["a", "b", "c"])
    got = {(r["domain"], r["reader"]): (r["n_clean"], r["n_poison"]) for r in rows}
    # a reads shared (40 → 4 twins) + its own (15 → 2); b: 40 + 7 (→ 1); c: shared only
    assert got == {("mock", "a"): (55, 6), ("mock", "b"): (47, 5), ("mock", "c"): (40, 4),
                   ("airline", "a"): (3, 0), ("airline", "b"): (3, 0), ("airline", "c"): (3, 0)}
    for r in rows:  # each solver's own share: within one item of the share asked
        assert abs(r["n_poison"] - 0.1 * (r["n_clean"] + r["n_poison"])) <= 1.0


def _source_run(tmp_path, cfg: dict, shared: int, private: dict[str, int]):
    src = tmp_path / "src"
    (src / "pool").mkdir(parents=True)
    dump_config(load_config_dict(cfg), src / "config.yaml")
    bank = MemoryBank(src / "memory", dedup_threshold=1.0)
    owners = [(None, i) for i in range(shared)] + [(o, i) for o, n in private.items() for i in range(n)]
    bank.add([MemoryItem(bank="private" if o else "shared", owner=o, domain="mock", distiller="x",
                         title=f"note {o} {i}", when_to_use=f"mock situation {o} {i}",
                         rule=f"In case {o} {i}, read record field f{i} before tool t{i % 7}.",
                         source_task_ids=[f"src-{o}-{i}"], method="edv") for o, i in owners])
    bank.save()
    return src


@pytest.mark.slow
def test_edv_contamination_share_per_solver(server, tmp_path):
    server.add_script("contaminator", contaminator)
    cfg = config(server, tmp_path, "edv", contamination=0.1, contamination_writer="judge",
                 edv={"n_executors": 2, "retrieval_tau": -1.0, "retrieval_k": 3,
                      "poison_per_task": 0, "routing": "fixed", "fixed_solver": "good"})
    src = _source_run(tmp_path, cfg, 60, {"good": 30, "bad": 45})
    run_dir = run({**cfg, "memory_from": str(src)})
    con = connect(run_dir)
    # the only solver, good, reads 60 shared + its 30 private items: 7 + 3 twins there
    # (bad's private bank got its 5 too, but good never reads them)
    assert con.execute("SELECT method, domain, owner, n_clean, n_poison, share_reached "
                       "FROM contamination_share").fetchall() == [("edv", "mock", "good", 90, 10, 0.1)]
    assert con.execute("SELECT count(*) FROM contamination_items").fetchone()[0] == 15
    from edv_ray.report.validity import run_checks

    checks = [c for c in run_checks(run_dir) if c.name == "contamination_share"]
    assert [c.figure.split(";")[0] for c in checks] == ["mock (good): 10/100 items = 0.100 (asked 0.1)"]
