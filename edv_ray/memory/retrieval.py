"""Stage-2 retrieval: top-k from the shared bank, filled from the solver's private bank.

Each (bank, owner) partition searches through its
:class:`~edv_ray.memory.index.PartitionIndex`: exact numpy search below
``MemoryBank.ann_threshold`` items (default 20k, ~1 ms), a faiss IVF index above it. The
domain and leave-one-task-out filters are applied *inside* the search (precomputed
bitmaps and per-task row lists; a faiss ``IDSelectorBitmap`` on the ANN path), so
excluded items never crowd out the allowed ones.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from edv_ray.memory.bank import MemoryBank
from edv_ray.memory.embeddings import Embedder, l2_normalise
from edv_ray.memory.records import MemoryItem

DEFAULT_K = 3
DEFAULT_TAU = 0.3  # cosine floor for all-MiniLM-L6-v2; the run config should set it


@dataclass(frozen=True)
class Retrieved:
    """One retrieved experience with its cosine score and the bank it came from."""

    item: MemoryItem
    score: float
    bank: str

    def render(self) -> str:
        return self.item.render()


def retrieve(
    bank: MemoryBank,
    query_text: str | None = None,
    *,
    query_embedding: Sequence[float] | np.ndarray | None = None,
    solver: str | None = None,
    k: int = DEFAULT_K,
    tau: float = DEFAULT_TAU,
    exclude_task_ids: Collection[str] = (),
    domain: str | None = None,
    embedder: Embedder | None = None,
    scope: str = "both",
) -> list[Retrieved]:
    """Up to ``k`` experiences for a query, shared bank first.

    ``scope``: ``both`` (shared, then the solver's private bank), ``shared`` only, or
    ``private`` only (the solver's own bank).

    Shared items with cosine >= ``tau`` are taken best-first; if fewer than ``k`` pass,
    the rest comes from ``solver``'s private bank (same ``tau``). Other agents' private
    items are never returned. Leave-one-task-out: an item whose ``source_task_ids``
    meets ``exclude_task_ids`` is removed *before* ranking, as are items of another
    ``domain`` when one is given. Ties break on ``item_id`` so results are deterministic.

    Give either ``query_text`` (embedded with ``embedder`` or the bank's embedder) or
    ``query_embedding``.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    if (query_text is None) == (query_embedding is None):
        raise ValueError("pass exactly one of query_text or query_embedding")
    if k == 0 or len(bank) == 0:
        return []
    if query_embedding is None:
        query = (embedder or bank.embedder).embed_one(query_text)  # type: ignore[arg-type]
    else:
        query = l2_normalise(np.asarray(query_embedding, dtype=np.float32))
    if query.ndim != 1:
        raise ValueError("query_embedding must be one vector")
    if bank.dim is not None and query.shape[0] != bank.dim:
        raise ValueError(f"query has {query.shape[0]} dims; the bank holds {bank.dim}-d vectors")

    if scope not in ("both", "shared", "private"):
        raise ValueError(f"scope {scope!r}: both | shared | private")
    excluded = frozenset(exclude_task_ids)
    out = [] if scope == "private" else _search(bank, "shared", None, query, k, tau, excluded, domain)
    if len(out) < k and solver is not None and scope != "shared":
        out += _search(bank, "private", solver, query, k - len(out), tau, excluded, domain)
    return out


def _search(
    bank: MemoryBank,
    which: str,
    owner: str | None,
    query: np.ndarray,
    k: int,
    tau: float,
    excluded: frozenset[str],
    domain: str | None,
) -> list[Retrieved]:
    hits = bank.search(which, owner, query, k, tau=tau, exclude_task_ids=excluded, domain=domain)
    return [Retrieved(item, score, which) for item, score in hits]
