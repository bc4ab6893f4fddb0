"""Contamination for ReasoningBank (see :mod:`edv_ray.methods.contamination`): per agent
bank and domain, wrong twins of clean items are appended to their host entries in a
copy of the frozen bank (``rb/bank_contaminated/poison@S/agent=A/``), so the twin is
retrieved with its host's task query — the same unit (items) and the same placement
(same-domain queries) as EDV's. Hosts are nested across shares (see
:func:`~edv_ray.methods.contamination.pick_hosts`); each agent reads only its own bank,
so its exposure is counted over that bank."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterator

from edv_ray.methods import contamination as C
from edv_ray.methods.reasoning_bank.config import NAME
from edv_ray.methods.reasoning_bank.store import ENTRY_SCHEMA, load_entries, visible
from edv_ray.results.parquet_io import read_rows, write_rows_atomic

DONE = "DONE"  # marker: a contaminated copy is complete


def contaminated_banks(ctx, rb, bank_of: Callable[[str], Path]) -> Iterator[tuple[float, Callable]]:
    """(share, agent → contaminated bank folder) per share asked; twins written first."""
    if not ctx.cfg.contamination:
        return
    agents = ctx.cfg.executor_names()
    # hosts among what retrieval can return: each past task's latest entry
    clean = {a: _hosts(visible(load_entries(bank_of(a)), None, None, set())) for a in agents}
    for share in ctx.cfg.contamination:
        hosts = {a: C.pick_hosts(clean[a], share, ctx.cfg.seed, f"{NAME}:{a}") for a in agents}
        flat: dict[str, list[C.Host]] = {}
        for a in agents:
            for d, hs in hosts[a].items():
                flat.setdefault(d, []).extend(hs)
        twins = C.all_twins(ctx, NAME, flat, share)
        if twins is None:
            continue
        root = ctx.run_dir / "rb" / "bank_contaminated" / C.condition(share)
        rows, exposure = [], []
        for a in agents:
            placed = [dict(p, bank="rb", owner=a)
                      for p in _write_copy(bank_of(a), root / f"agent={a}", hosts[a], twins)]
            rows += C.share_rows(ctx.run_id, NAME, share, clean[a], placed)
            exposure += C.exposure_rows(ctx.run_id, NAME, share, clean[a], placed, [a])
        C.record(ctx.run_dir, NAME, share, rows, exposure)
        ctx.console.print(f"reasoning_bank contamination {share:g}: {len(rows)} twin(s) in "
                          f"{len(agents)} bank(s)")
        yield share, (lambda agent, root=root: root / f"agent={agent}")


def _hosts(entries: list[dict]) -> dict[str, list[C.Host]]:
    out: dict[str, list[C.Host]] = {}
    for e in entries:
        for i, item in enumerate(e["items"]):
            out.setdefault(e["domain"], []).append(C.Host(
                e["domain"], f"{e['entry_id']}:{i}", e["task_id"], item["title"],
                item["description"], item["content"], where={"entry_id": e["entry_id"]}))
    return out


def _write_copy(src: Path, dest: Path, hosts: dict[str, list[C.Host]],
                twins: dict[tuple[str, int], dict]) -> list[dict]:
    """Copy the bank, then append each host's twins to its entry; returns the placed
    poison items (id = ``<entry_id>:<index>``). Done once (a marker file)."""
    adds: dict[str, list[dict]] = {}
    seen: dict[str, int] = {}
    for hs in hosts.values():
        for h in hs:
            copy = seen.get(h.item_id, 0)
            seen[h.item_id] = copy + 1
            t = twins[(h.item_id, copy)]
            adds.setdefault(h.where["entry_id"], []).append(dict(
                domain=h.domain, host_item_id=h.item_id, title=t["title"], rule=t["rule"],
                source=t["source"], item={"title": t["title"], "description": t["when_to_use"],
                                          "content": t["rule"]}))
    if not (dest / DONE).exists():
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest)
        for f in sorted(dest.rglob("*.parquet")):
            rows = read_rows(f)
            if not any(r["entry_id"] in adds for r in rows):
                continue
            for r in rows:
                have, new = list(r["items"] or []), [a["item"] for a in adds.get(r["entry_id"], [])]
                sources = list(r.get("item_episode_ids") or [None] * len(have))
                r["items"], r["item_episode_ids"] = have + new, sources + [None] * len(new)
            write_rows_atomic(rows, f, ENTRY_SCHEMA)
        (dest / DONE).write_text("ok")
    placed = []
    counts = {e["entry_id"]: len(e["items"]) for e in load_entries(src)}
    for entry_id, items in sorted(adds.items()):
        for k, a in enumerate(items):
            placed.append(dict(domain=a["domain"], item_id=f"{entry_id}:{counts[entry_id] + k}",
                               host_item_id=a["host_item_id"], title=a["title"], rule=a["rule"],
                               source=a["source"]))
    return placed
