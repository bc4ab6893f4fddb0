"""The shared and private experience banks, persisted as hive-partitioned Parquet.

Layout under ``root`` (e.g. ``RUN_DIR/memory``), one file per partition::

    bank=shared/owner=__HIVE_DEFAULT_PARTITION__/items.parquet
    bank=private/owner=<agent>/items.parquet

Every partition has the same depth (DuckDB refuses mixed-depth hive paths with "Hive
partition mismatch"), and ``__HIVE_DEFAULT_PARTITION__`` is the hive spelling of NULL
(DuckDB and pyarrow read it as NULL; agent names cannot start with ``_``), so one query
reads the whole store with ``owner IS NULL`` for shared items::

    SELECT * FROM read_parquet('RUN_DIR/memory/**/*.parquet', hive_partitioning=true)

Each file also carries its own ``bank``/``owner`` columns with the schema
:data:`BANK_SCHEMA`, so a file read on its own is complete.
Writes go through :mod:`edv_ray.results.parquet_io` (temp file, then rename).

A ``MemoryBank`` is a single-writer object (the driver owns it); an internal lock only
guards against accidental concurrent use from threads. Each partition keeps its vectors
in an :class:`~edv_ray.memory.index.PartitionIndex` (exact search when small, a faiss IVF
index above ``ann_threshold`` items), which is rebuilt from the embeddings on load.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edv_ray.memory.embeddings import Embedder, l2_normalise
from edv_ray.memory.index import ANY_DOMAIN, DEFAULT_ANN_THRESHOLD, PartitionIndex
from edv_ray.memory.records import BANK_SCHEMA, MemoryItem, merge_items
from edv_ray.results.parquet_io import read_rows, write_rows_atomic

DEFAULT_DEDUP_THRESHOLD = 0.92
ITEMS_FILE = "items.parquet"
SHARED_OWNER_DIR = "__HIVE_DEFAULT_PARTITION__"  # owner=NULL (the shared bank)

PartitionKey = tuple[str, "str | None"]


def partition_path(root: str | os.PathLike, bank: str, owner: str | None) -> Path:
    """Where the items of one bank (and owner) live."""
    owner_dir = SHARED_OWNER_DIR if bank == "shared" else owner
    return Path(root) / f"bank={bank}" / f"owner={owner_dir}" / ITEMS_FILE


@dataclass
class AddResult:
    """What :meth:`MemoryBank.add` did with each incoming item."""

    added: list[str] = field(default_factory=list)  # item ids stored as new items
    merged: list[tuple[str, str]] = field(default_factory=list)  # (incoming id, kept id)
    skipped: list[str] = field(default_factory=list)  # ids already in the bank (re-adds)


class _Partition:
    """Items of one (bank, owner) plus their unit embeddings in a searchable index."""

    def __init__(self, ann_threshold: int = DEFAULT_ANN_THRESHOLD) -> None:
        self.items: list[MemoryItem] = []
        self.index = PartitionIndex(ann_threshold=ann_threshold)
        self.by_exact: dict[tuple[str | None, str], int] = {}

    @property
    def matrix(self) -> np.ndarray:
        if not self.items:
            return np.zeros((0, 0), dtype=np.float32)
        return self.index.matrix

    def append(self, item: MemoryItem, vec: np.ndarray) -> None:
        n = self.index.add(vec, item.item_id, item.domain, item.source_task_ids)
        self.items.append(item)
        self.by_exact.setdefault((item.domain, item.exact_key), n)

    def replace(self, idx: int, item: MemoryItem) -> None:
        """Item ``idx`` absorbed another: same text and embedding, more source tasks."""
        self.items[idx] = item
        self.index.add_tasks(idx, item.source_task_ids)


class MemoryBank:
    """Shared + private experience banks with de-duplication and provenance merging."""

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        dedup_threshold: float = DEFAULT_DEDUP_THRESHOLD,
        embedder: Embedder | None = None,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
    ) -> None:
        if not 0.0 < dedup_threshold <= 1.0:
            raise ValueError("dedup_threshold must be in (0, 1]")
        self.root = Path(root) if root is not None else None
        self.dedup_threshold = dedup_threshold
        self._embedder = embedder
        self.ann_threshold = ann_threshold  # partitions this large search an ANN index
        self._parts: dict[PartitionKey, _Partition] = {}
        self._where: dict[str, tuple[PartitionKey, int]] = {}  # item id or absorbed id
        self._dirty: set[PartitionKey] = set()
        self._dim: int | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ persistence
    @classmethod
    def load(
        cls,
        root: str | os.PathLike,
        *,
        dedup_threshold: float = DEFAULT_DEDUP_THRESHOLD,
        embedder: Embedder | None = None,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
    ) -> MemoryBank:
        """Read every partition under ``root`` (an empty bank when there is none).

        Search indexes are rebuilt from the stored embeddings (the ANN index lazily, on
        the first search of a partition above ``ann_threshold``).
        """
        bank = cls(
            root, dedup_threshold=dedup_threshold, embedder=embedder, ann_threshold=ann_threshold
        )
        for path in sorted(Path(root).glob(f"bank=*/owner=*/{ITEMS_FILE}")):
            for row in read_rows(path):
                item = MemoryItem.from_row(row)
                if item.item_id in bank._where:
                    continue
                vec = bank._vector(item)
                bank._check_dims([vec])
                bank._insert(item, vec)
        bank._dirty.clear()
        return bank

    def save(self, root: str | os.PathLike | None = None) -> list[Path]:
        """Write changed partitions atomically (all of them when saving to a new root).

        The shared partition is always written, so readers find a typed (maybe empty)
        table. Returns the paths written.
        """
        with self._lock:
            target = Path(root) if root is not None else self.root
            if target is None:
                raise ValueError("MemoryBank has no root folder: pass save(root)")
            keys = set(self._dirty)
            if target != self.root:
                keys = set(self._parts)
            keys.add(("shared", None))
            written = []
            for key in sorted(keys, key=lambda k: (k[0], k[1] or "")):
                part = self._parts.get(key) or _Partition()
                rows = [it.to_row() for it in part.items]
                written.append(write_rows_atomic(rows, partition_path(target, *key), BANK_SCHEMA))
            self.root = target
            self._dirty.clear()
            return written

    # ------------------------------------------------------------------ writes
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = Embedder()
        return self._embedder

    def add(self, items: Iterable[MemoryItem]) -> AddResult:
        """Add items, merging exact and near duplicates within the same bank/owner/domain.

        * exact duplicate: same normalised rule text;
        * near duplicate: cosine(embedding) >= ``dedup_threshold``.

        The kept (older) item absorbs the newcomer's provenance (source tasks,
        trajectory ids, votes, tags) and its ``merged_count`` grows. Items without an
        embedding are embedded from ``text``. An item whose id is already stored (or was
        already absorbed) is skipped, so re-adding after a resume changes nothing.
        """
        items = list(items)
        with self._lock:
            result = AddResult()
            missing = [i for i, it in enumerate(items) if not it.embedding]
            if missing:
                vecs = self.embedder.embed([items[i].text for i in missing])
                for i, vec in zip(missing, vecs, strict=True):
                    items[i] = items[i].model_copy(update={"embedding": vec.tolist()})
            vecs = [self._vector(item) for item in items]  # validate all before any change
            self._check_dims(vecs)
            for item, vec in zip(items, vecs, strict=True):
                if item.item_id in self._where:
                    result.skipped.append(item.item_id)
                    continue
                key = (item.bank, item.owner)
                hit = self._find_duplicate(key, item, vec)
                if hit is None:
                    self._insert(item, vec)
                    result.added.append(item.item_id)
                else:
                    part = self._parts[key]
                    kept = merge_items(part.items[hit], item)
                    part.replace(hit, kept)
                    for absorbed in [item.item_id, *item.merged_item_ids]:
                        self._where.setdefault(absorbed, (key, hit))
                    result.merged.append((item.item_id, kept.item_id))
                self._dirty.add(key)
            return result

    def _vector(self, item: MemoryItem) -> np.ndarray:
        vec = l2_normalise(np.asarray(item.embedding, dtype=np.float32))
        if vec.ndim != 1 or vec.shape[0] == 0:
            raise ValueError(f"item {item.item_id} has no usable embedding")
        return vec

    def _check_dims(self, vecs: list[np.ndarray]) -> None:
        dims = {int(v.shape[0]) for v in vecs} | ({self._dim} if self._dim else set())
        if len(dims) > 1:
            raise ValueError(f"embeddings of {sorted(dims)} dimensions in one bank; nothing added")
        if dims:
            self._dim = dims.pop()

    def _insert(self, item: MemoryItem, vec: np.ndarray) -> None:
        item = item.model_copy(update={"embedding": vec.tolist()})
        key = (item.bank, item.owner)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Partition(self.ann_threshold)
        part.append(item, vec)
        idx = len(part.items) - 1
        for item_id in [item.item_id, *item.merged_item_ids]:
            self._where.setdefault(item_id, (key, idx))

    def _find_duplicate(self, key: PartitionKey, item: MemoryItem, vec: np.ndarray) -> int | None:
        part = self._parts.get(key)
        if part is None or not part.items:
            return None
        exact = part.by_exact.get((item.domain, item.exact_key))
        if exact is not None:
            return exact
        # nearest item of the same domain (domain None matches only domain None)
        hits = part.index.search(vec, 1, tau=self.dedup_threshold, domain=item.domain)
        return hits[0][0] if hits else None

    # ------------------------------------------------------------------ reads
    def partition(self, bank: str, owner: str | None = None) -> tuple[list[MemoryItem], np.ndarray]:
        """Items of one bank/owner and their unit embeddings (row i = item i; read-only)."""
        with self._lock:
            part = self._parts.get((bank, owner if bank == "private" else None))
            if part is None:
                return [], np.zeros((0, self._dim or 0), dtype=np.float32)
            return list(part.items), part.matrix.copy()

    def search(
        self,
        bank: str,
        owner: str | None,
        query: np.ndarray,
        k: int,
        *,
        tau: float = -np.inf,
        exclude_task_ids: Collection[str] = (),
        domain: str | None = None,
    ) -> list[tuple[MemoryItem, float]]:
        """The ``k`` best (item, cosine) of one partition, filters applied inside the search.

        ``domain=None`` means any domain; items from a task in ``exclude_task_ids`` are
        never returned; scores below ``tau`` are dropped; ties break on ``item_id``.
        """
        with self._lock:
            part = self._parts.get((bank, owner if bank == "private" else None))
            if part is None or not part.items:
                return []
            hits = part.index.search(
                query,
                k,
                tau=tau,
                exclude_task_ids=exclude_task_ids,
                domain=ANY_DOMAIN if domain is None else domain,
            )
            return [(part.items[row], score) for row, score in hits]

    def items(self, bank: str | None = None, owner: str | None = None) -> list[MemoryItem]:
        """All items, optionally of one bank and (private) owner."""
        out = []
        for (b, o), part in sorted(self._parts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            if (bank is None or b == bank) and (owner is None or o == owner):
                out.extend(part.items)
        return out

    def owners(self) -> list[str]:
        """Agents that own a private bank."""
        return sorted(o for b, o in self._parts if b == "private" and o is not None)

    def get(self, item_id: str) -> MemoryItem | None:
        """The stored item with this id, or the item that absorbed it."""
        loc = self._where.get(item_id)
        if loc is None:
            return None
        key, idx = loc
        return self._parts[key].items[idx]

    @property
    def dim(self) -> int | None:
        return self._dim

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._where

    def __len__(self) -> int:
        return sum(len(p.items) for p in self._parts.values())

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(self.items())
