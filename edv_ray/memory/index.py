"""Vector index of one bank partition: exact numpy search when small, faiss IVF when large.

A :class:`PartitionIndex` holds the unit embeddings of one (bank, owner) partition (row i
= item i), the item ids (the tie-break key), and the filter structures that retrieval
needs, kept up to date on every insert so that no Python predicate runs per item per
query:

* one domain code per row (``int32`` array) and, per domain, a packed bitmap of its rows
  (extended lazily over the rows added since the last query);
* per source task, the rows whose item came from it (leave-one-task-out clears those
  bits).

Search is exact (one matrix-vector product, ties broken on ``item_id``) while the
partition has fewer than ``ann_threshold`` rows, or when faiss is not installed. Above it
a faiss IVF index with 8-bit scalar-quantised codes (``IndexIVFScalarQuantizer``, inner
product; a quarter of the float32 memory and ~3x faster to scan) is built on first
search; candidates are re-scored exactly from the stored float32 rows. Rows added later are
scanned exactly until 1,024 have accumulated, then added to it in one batch (faiss adds
are cheap per batch, not per row); it is retrained when the partition has grown 4x. The
filters run *inside* the faiss search as an ``IDSelectorBitmap``, so excluded items never
take a slot of the result; if the probed lists hold fewer than ``k`` allowed items the
search is repeated with more lists, and finally falls back to the exact search. Returned
scores are recomputed from the stored float32 rows, so both paths score alike.

All methods take the index's own lock: faiss ``add`` must not run alongside a search.
faiss is imported only when an ANN index is first built.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_ANN_THRESHOLD = 20_000  # rows; below it exact numpy search (~1 ms) is used
DEFAULT_NPROBE = None  # IVF lists probed first: None = max(8, nlist // 64)
RETRAIN_GROWTH = 4  # retrain the IVF quantizer when the partition grew this much
TAIL_ROWS = 1024  # rows added since the last sync are scanned exactly until this many
ANY_DOMAIN = object()  # search(domain=ANY_DOMAIN): no domain filter (domain=None: items without one)

_faiss = None
_faiss_missing = False


def _load_faiss():  # returns the faiss module or None
    global _faiss, _faiss_missing
    if _faiss is None and not _faiss_missing:
        try:
            import faiss  # optional and heavy: imported on first use

            _faiss = faiss
        except ImportError:
            _faiss_missing = True
            log.warning("faiss is not installed: large memory banks use exact search")
    return _faiss


def faiss_available() -> bool:
    return _load_faiss() is not None


def choose_nlist(n: int) -> int:
    """IVF list count: the power of two nearest 2*sqrt(n), at least 16."""
    target = max(16.0, 2.0 * np.sqrt(max(n, 1)))
    return int(2 ** round(np.log2(target)))


class PartitionIndex:
    """Embeddings + filter structures of one partition, searchable with filters."""

    def __init__(
        self,
        dim: int | None = None,
        *,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
        nprobe: int | None = DEFAULT_NPROBE,
    ) -> None:
        self.dim = dim
        self.ann_threshold = ann_threshold
        self.nprobe = nprobe
        self._n = 0
        self._vecs = np.zeros((0, dim or 0), dtype=np.float32)
        self._codes = np.zeros(0, dtype=np.int32)
        self._ids: list[str] = []
        self._domains: dict[object, int] = {}  # domain value (None allowed) -> code
        self._domain_bits: dict[int, tuple[np.ndarray, int]] = {}  # code -> (packed, rows covered)
        self._task_rows: dict[str, list[int]] = {}
        self._task_arrays: dict[str, np.ndarray] = {}  # cache of _task_rows as arrays
        self._ann = None  # faiss IVF-SQ8 index over rows [0, _ann.ntotal)
        self._quantizer = None  # kept alive alongside _ann
        self._trained_n = 0
        self._lock = threading.Lock()
        # search counters: ANN searches, extra probe rounds, ANN searches answered exactly
        self.stats = {"ann": 0, "reprobe": 0, "exact_fallback": 0}

    # ------------------------------------------------------------------ writes
    def add(
        self, vec: np.ndarray, item_id: str, domain: str | None, task_ids: Iterable[str]
    ) -> int:
        """Append one row (a unit vector); returns its row number."""
        return self.add_many(np.asarray(vec, dtype=np.float32)[None, :], [item_id], [domain],
                             [task_ids])

    def add_many(
        self,
        vecs: np.ndarray,
        item_ids: Sequence[str],
        domains: Sequence[str | None],
        task_ids: Sequence[Iterable[str]],
    ) -> int:
        """Append rows in one go (unit vectors); returns the first new row number.

        Cheap: arrays grow by doubling; the ANN index takes the new rows at the next search.
        """
        vecs = np.asarray(vecs, dtype=np.float32)
        m = vecs.shape[0]
        if not (len(item_ids) == len(domains) == len(task_ids) == m) or vecs.ndim != 2:
            raise ValueError("vecs, item_ids, domains and task_ids must have one entry per row")
        with self._lock:
            if self.dim is None:
                self.dim = int(vecs.shape[1])
                self._vecs = np.zeros((0, self.dim), dtype=np.float32)
            if vecs.shape[1] != self.dim:
                raise ValueError(f"vectors of {vecs.shape[1]} dims; the index holds {self.dim}")
            start = self._n
            self._reserve(start + m)
            self._vecs[start : start + m] = vecs
            codes = [self._domains.setdefault(d, len(self._domains)) for d in domains]
            self._codes[start : start + m] = codes
            self._ids.extend(item_ids)
            for row, tasks in enumerate(task_ids, start):
                for task in dict.fromkeys(tasks):
                    self._task_rows.setdefault(task, []).append(row)
                    self._task_arrays.pop(task, None)
            self._n = start + m
            return start

    def add_tasks(self, row: int, task_ids: Iterable[str]) -> None:
        """Row ``row`` now also comes from ``task_ids`` (after a provenance merge)."""
        with self._lock:
            if not 0 <= row < self._n:
                raise IndexError(row)
            for task in dict.fromkeys(task_ids):
                rows = self._task_rows.setdefault(task, [])
                if row not in rows:
                    rows.append(row)
                    self._task_arrays.pop(task, None)

    def _reserve(self, n: int) -> None:
        cap = self._vecs.shape[0]
        if n <= cap:
            return
        cap = max(n, 2 * cap, 16)
        vecs = np.zeros((cap, self.dim), dtype=np.float32)
        vecs[: self._n] = self._vecs[: self._n]
        codes = np.zeros(cap, dtype=np.int32)
        codes[: self._n] = self._codes[: self._n]
        self._vecs, self._codes = vecs, codes

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return self._n

    @property
    def matrix(self) -> np.ndarray:
        """The stored rows (a view; do not modify)."""
        return self._vecs[: self._n]

    @property
    def uses_ann(self) -> bool:
        """Whether searches go through the ANN index (partition above the threshold)."""
        return self._n >= self.ann_threshold and faiss_available()

    @property
    def nprobe_in_use(self) -> int | None:
        """IVF lists probed first by the built ANN index (None before it is built)."""
        if self._ann is None:
            return None
        return min(self.nprobe or max(8, int(self._ann.nlist) // 64), int(self._ann.nlist))

    def build(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """Build (or bring up to date) the ANN index now instead of at the next search.

        ``progress(stage, done, total)`` is called while training and adding rows.
        """
        with self._lock:
            if self.uses_ann:
                self._sync_ann(progress)

    def search(
        self,
        query: np.ndarray,
        k: int,
        *,
        tau: float = -np.inf,
        exclude_task_ids: Collection[str] = (),
        domain: object = ANY_DOMAIN,
        exact: bool = False,
    ) -> list[tuple[int, float]]:
        """(row, cosine) of the ``k`` best allowed rows with score >= ``tau``, best first.

        Allowed: ``domain`` matches (unless :data:`ANY_DOMAIN`) and no source task is in
        ``exclude_task_ids``. Ties break on the smaller item id. ``exact=True`` forces the
        exact search.
        """
        query = np.asarray(query, dtype=np.float32)
        with self._lock:
            if k <= 0 or self._n == 0:
                return []
            if domain is not ANY_DOMAIN and domain not in self._domains:
                return []
            excluded = self._excluded_rows(exclude_task_ids)
            if not exact and self.uses_ann:
                hits = self._ann_search(query, k, tau, excluded, domain)
                if hits is not None:
                    return hits
            return self._exact_search(query, k, tau, excluded, domain)

    # ------------------------------------------------------------------ exact path
    def _excluded_rows(self, task_ids: Collection[str]) -> np.ndarray:
        arrays = []
        for task in task_ids:
            arr = self._task_arrays.get(task)
            if arr is None:
                if task not in self._task_rows:
                    continue
                arr = self._task_arrays[task] = np.asarray(self._task_rows[task], dtype=np.int64)
            arrays.append(arr)
        if not arrays:
            return np.zeros(0, dtype=np.int64)
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

    def _exact_search(
        self, query: np.ndarray, k: int, tau: float, excluded: np.ndarray, domain: object
    ) -> list[tuple[int, float]]:
        scores = self.matrix @ query
        mask = scores >= tau
        if domain is not ANY_DOMAIN:
            mask &= self._codes[: self._n] == self._domains[domain]
        mask[excluded] = False
        rows = np.flatnonzero(mask)
        return self._rank(rows, scores[rows], k)

    def _rank(self, rows: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k best of ``rows`` (with their ``scores``), best first, ties on item id."""
        if rows.size > k:
            # keep everything tied with the k-th score so the tie-break below is exact
            kth = np.partition(scores, rows.size - k)[rows.size - k]
            keep = scores >= kth
            rows, scores = rows[keep], scores[keep]
        order = sorted(range(rows.size), key=lambda j: (-float(scores[j]), self._ids[rows[j]]))
        return [(int(rows[j]), float(scores[j])) for j in order[:k]]

    # ------------------------------------------------------------------ ANN path
    def _sync_ann(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        faiss = _load_faiss()
        if self._ann is None or self._n >= RETRAIN_GROWTH * self._trained_n:
            nlist = max(1, min(choose_nlist(self._n), self._n // 40))  # >= 40 rows a list
            quantizer = faiss.IndexFlatIP(self.dim)
            ann = faiss.IndexIVFScalarQuantizer(
                quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                faiss.METRIC_INNER_PRODUCT,
            )
            ann.cp.niter = 12
            ann.cp.seed = 1234
            n_train = min(self._n, 40 * nlist)
            rng = np.random.default_rng(0)
            rows = np.sort(rng.choice(self._n, size=n_train, replace=False))
            if progress:
                progress("train", 0, n_train)
            ann.train(np.ascontiguousarray(self._vecs[rows]))
            self._ann, self._quantizer, self._trained_n = ann, quantizer, self._n
        added = int(self._ann.ntotal)
        step = 65_536
        for lo in range(added, self._n, step):  # faiss ids = row numbers
            self._ann.add(np.ascontiguousarray(self._vecs[lo : min(lo + step, self._n)]))
            if progress:
                progress("add", min(lo + step, self._n) - added, self._n - added)

    def _allowed_bitmap(self, excluded: np.ndarray, domain: object) -> np.ndarray | None:
        """Packed little-endian bitmap of allowed rows (faiss layout), None = all rows."""
        if domain is ANY_DOMAIN and excluded.size == 0:
            return None
        nbytes = (self._n + 7) // 8
        if domain is ANY_DOMAIN:
            bits = np.full(nbytes, 0xFF, dtype=np.uint8)
        else:
            bits = self._domain_bitmap(self._domains[domain])[:nbytes].copy()
        if excluded.size:
            masks = np.left_shift(1, excluded & 7).astype(np.uint8)
            np.bitwise_and.at(bits, excluded >> 3, np.invert(masks))
        return bits  # bits past self._n are never consulted: faiss ids stop at _n - 1

    def _domain_bitmap(self, code: int) -> np.ndarray:
        packed, covered = self._domain_bits.get(code, (np.zeros(0, dtype=np.uint8), 0))
        if covered < self._n:
            lo = (covered // 8) * 8  # redo the partial byte
            tail = np.packbits(self._codes[lo : self._n] == code, bitorder="little")
            need = lo // 8 + tail.size
            if need > packed.size:
                grown = np.zeros(max(need, 2 * packed.size), dtype=np.uint8)
                grown[: packed.size] = packed
                packed = grown
            packed[lo // 8 : need] = tail
            self._domain_bits[code] = (packed, self._n)
        return packed

    def _ann_search(
        self, query: np.ndarray, k: int, tau: float, excluded: np.ndarray, domain: object
    ) -> list[tuple[int, float]] | None:
        """ANN hits, or None when too few allowed items were found (caller goes exact)."""
        faiss = _load_faiss()
        self.stats["ann"] += 1
        if (
            self._ann is None
            or self._n >= RETRAIN_GROWTH * self._trained_n
            or self._n - self._ann.ntotal >= TAIL_ROWS
        ):
            self._sync_ann()
        bits = self._allowed_bitmap(excluded, domain)
        params = faiss.SearchParametersIVF()
        if bits is not None:
            selector = faiss.IDSelectorBitmap(bits.size, faiss.swig_ptr(bits))
            params.sel = selector  # `selector` and `bits` stay alive until the search ends
        # over-fetch: the 8-bit scores only shortlist; the exact re-score ranks (and ties)
        fetch = max(4 * k, k + 32)
        nlist = int(self._ann.nlist)
        nprobe = self.nprobe_in_use
        q = np.ascontiguousarray(query[None, :])
        while True:
            params.nprobe = nprobe
            _, ids = self._ann.search(q, fetch, params=params)
            rows = ids[0][ids[0] >= 0]
            if rows.size >= k:
                break
            if nprobe >= nlist // 8:
                self.stats["exact_fallback"] += 1
                return None  # very selective filter: the exact search is the cheaper answer
            self.stats["reprobe"] += 1
            nprobe = min(nprobe * 4, nlist)
        rows = np.concatenate([rows, self._tail_rows(excluded, domain)])
        scores = self._vecs[rows] @ query
        keep = scores >= tau
        return self._rank(rows[keep], scores[keep], k)

    def _tail_rows(self, excluded: np.ndarray, domain: object) -> np.ndarray:
        """Allowed rows added since the last ANN sync (searched exactly, < TAIL_ROWS)."""
        lo = int(self._ann.ntotal)
        if lo >= self._n:
            return np.zeros(0, dtype=np.int64)
        keep = np.ones(self._n - lo, dtype=bool)
        if domain is not ANY_DOMAIN:
            keep &= self._codes[lo : self._n] == self._domains[domain]
        keep[excluded[excluded >= lo] - lo] = False
        return np.flatnonzero(keep) + lo
