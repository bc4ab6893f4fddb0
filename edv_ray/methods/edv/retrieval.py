"""EDV's retrieval provider, called in the episode worker once the agent has observed its
task (see :class:`edv_ray.runtime.spec.MemoryRequest`): top-k from the shared bank, filled
from the solver's private bank, threshold τ, leave-one-task-out, same domain.

The bank is read from the run folder and cached per process; a bank whose files changed
(a new epoch's items) is read again. The bank does not change while episodes that read
it run: EDV writes memory only between stages.
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

    bank = load_bank(params["bank_dir"], params.get("dedup_threshold", 0.92))
    if len(bank) == 0 or not observed_text.strip():
        return Retrieval()
    hits = retrieve(bank, observed_text, solver=params["solver"], k=params["k"],
                    tau=params["tau"], exclude_task_ids=params.get("exclude_task_ids") or (),
                    domain=params.get("domain"))
    return Retrieval(texts=[h.item.render() for h in hits],
                     item_ids=[h.item.item_id for h in hits], banks=[h.bank for h in hits])


def memory_fn(ctx, e):
    """Retrieval for (task, solver): shared first, then the solver's private bank,
    never an item distilled from this task (leave-one-task-out, default on)."""
    if e.retrieval_k == 0:
        return None
    def fn(domain, task, agent):
        return MemoryRequest(provider="edv_ray.methods.edv.retrieval:edv_experiences", params=dict(
            bank_dir=str(ctx.run_dir / "memory"), solver=agent, k=e.retrieval_k,
            tau=e.retrieval_tau, domain=domain, dedup_threshold=e.dedup_threshold,
            exclude_task_ids=[task.id] if e.leave_one_task_out else []))
    return fn
