"""EDV's retrieval provider, called in the episode worker once the agent has observed its
task (see :class:`edv_ray.runtime.spec.MemoryRequest`): top-k from the shared bank, filled
from the solver's private bank, threshold τ, leave-one-task-out, same domain.

The bank is a frozen snapshot (``memory_snapshots/epoch=E`` or a contaminated copy),
read once per process and cached; its version is part of each episode's identity.
"""

from __future__ import annotations

import threading
from pathlib import Path

from edv_ray.runtime.spec import MemoryRequest, Retrieval

_lock = threading.Lock()
_cache: dict[str, tuple[tuple, object]] = {}


def _signature(bank_dir: Path) -> tuple:
    return tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size)
                        for p in bank_dir.rglob("*.parquet")))


def load_bank(bank_dir: str, dedup_threshold: float):
    from edv_ray.memory import MemoryBank

    path = Path(bank_dir)
    sig = _signature(path) if path.is_dir() else ()
    with _lock:
        hit = _cache.get(bank_dir)
        if hit is None or hit[0] != sig:
            hit = (sig, MemoryBank.load(path, dedup_threshold=dedup_threshold))
            _cache[bank_dir] = hit
        return hit[1]


def edv_experiences(observed_text: str, params: dict) -> Retrieval:
    from edv_ray.memory import retrieve

    bank = load_bank(params["_bank_dir"], 1.0)  # a frozen bank: read, never merged into
    if len(bank) == 0 or not observed_text.strip():
        return Retrieval()
    hits = retrieve(bank, observed_text, solver=params["solver"], k=params["k"],
                    tau=params["tau"], exclude_task_ids=params.get("exclude_task_ids") or (),
                    domain=params.get("domain"), scope=params.get("scope", "both"))
    return Retrieval(texts=[h.item.render() for h in hits],
                     item_ids=[h.item.item_id for h in hits], banks=[h.bank for h in hits])


def memory_fn(ctx, e, bank_dir: Path, info: dict | None, inst=None):
    """Retrieval for (task, solver) from the frozen bank at ``bank_dir`` (``info``: its
    version): shared first, then the solver's private bank (``edv.retrieval_scope``),
    never an item distilled from this task (leave-one-task-out, default on). None — no
    memory — when k = 0 or the bank is empty: such an episode is the same episode as one
    run without memory (and may be shared with Router and another EDV instance). An EDV
    instance other than ``edv`` names itself in the request (part of the memory's key):
    an episode that reads its bank is never another instance's episode."""
    if e.retrieval_k == 0 or not info or info.get("items", 0) == 0:
        return None
    owner = {} if inst is None or inst.main else {"instance": inst.name}

    def fn(domain, task, agent):
        return MemoryRequest(
            provider="edv_ray.methods.edv.retrieval:edv_experiences", version=info["version"],
            params=dict(_bank_dir=str(bank_dir), solver=agent, k=e.retrieval_k,
                        tau=e.retrieval_tau, domain=domain, scope=e.retrieval_scope,
                        exclude_task_ids=[task.id] if e.leave_one_task_out else [], **owner))
    return fn


def construction_memory(ctx, e, epoch: int, inst=None):
    """Epoch ``epoch``'s memory-guided executions read the bank frozen after the epoch
    before (none in epoch 0)."""
    from edv_ray.methods.edv.banks import snapshot_dir, version_of
    from edv_ray.methods.edv.instance import EDV

    if not e.retrieve_during_construction or epoch == 0:
        return None
    frozen = snapshot_dir(ctx.run_dir, epoch - 1, inst or EDV)
    return memory_fn(ctx, e, frozen, version_of(frozen), inst)
