"""Vector index of one bank partition: exact numpy search when small, faiss IVF when large.

A :class:`PartitionIndex` holds the unit embeddings of one (bank, owner) partition (row i
= item i), the item ids (the tie-break key), and the filter structures that retrieval
needs, kept up to date on every insert so that no Python predicate runs per item per
query:

* one domain code per row (``int32`` array) and, per domain, its rows (extended lazily
  over the rows added since the last query);
* per source task, the rows whose item came from it (leave-one-task-out drops those).

Search is exact (one matrix-vector product, ties broken on ``item_id``) for a domain with
fewer than ``ann_threshold`` rows, or when faiss is not installed. A domain above it gets
its own faiss IVF index (:class:`~edv_ray.memory.ivf.DomainIVF`, 8-bit codes), built on
first search: the domain filter is the index itself, and leave-one-task-out runs *inside*
the faiss search as an ``IDSelectorBitmap``, so excluded items never take a slot of the
result. Candidates are re-scored exactly from the stored float32 rows, so both paths score
alike. Rows added later are scanned exactly until 1,024 have accumulated, then added to the
index in one batch (faiss adds are cheap per batch, not per row); an index is retrained
when its domain has grown 4x. If the probed lists hold fewer than ``k`` allowed items the
search is repeated with more lists, and finally falls back to the exact search. A search
over every domain merges each domain's candidates.

All methods take the index's own lock: faiss ``add`` must not run alongside a search.
faiss is imported only when an ANN index is first built.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np

from edv_ray.memory.ivf import DomainIVF, default_nprobe

log = logging.getLogger(__name__)

DEFAULT_ANN_THRESHOLD = 20_000  # rows of a domain; below it exact numpy search (~1 ms)
DEFAULT_NPROBE = None  # IVF lists probed first: None = ivf.default_nprobe(nlist)
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
        # code -> (row buffer, rows in it, partition rows scanned so far)
        self._domain_rows_cache: dict[int, tuple[np.ndarray, int, int]] = {}
        self._domain_n: dict[int, int] = {}  # code -> rows
        self._task_rows: dict[str, list[int]] = {}
        self._task_arrays: dict[str, np.ndarray] = {}  # cache of _task_rows as arrays
        self._ivf: dict[int, DomainIVF] = {}  # domain code -> its IVF (large domains only)
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
            for code in codes:
                self._domain_n[code] = self._domain_n.get(code, 0) + 1
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
        """Whether some domain is searched through an ANN index (above the threshold)."""
        return (any(n >= self.ann_threshold for n in self._domain_n.values())
                and faiss_available())

    def ann_lists(self) -> dict[object, tuple[int, int]]:
        """domain -> (rows in its IVF index, IVF lists), for the domains that have one."""
        names = {code: d for d, code in self._domains.items()}
        return {names[c]: (int(ivf.ann.ntotal), ivf.nlist) for c, ivf in self._ivf.items()}

    def _nprobe(self, ivf: DomainIVF) -> int:
        return min(self.nprobe or default_nprobe(ivf.nlist), ivf.nlist)

    def build(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """Build (or bring up to date) the ANN indexes now instead of at the next search.

        ``progress(stage, done, total)`` is called while training and adding rows.
        """
        with self._lock:
            if self.uses_ann:
                for code in list(self._domain_n):
                    rows = self._domain_rows(code)
                    if rows.size >= self.ann_threshold:
                        self._domain_ivf(code, rows, progress)

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
    def _domain_rows(self, code: int) -> np.ndarray:
        """The domain's rows, increasing (a view; extended over rows added since the last
        call into a buffer that doubles, so one add between searches costs O(1))."""
        buf, count, covered = self._domain_rows_cache.get(
            code, (np.zeros(16, dtype=np.int64), 0, 0))
        if covered < self._n:
            new = np.flatnonzero(self._codes[covered : self._n] == code) + covered
            if count + new.size > buf.size:
                grown = np.zeros(max(2 * buf.size, count + new.size), dtype=np.int64)
                grown[:count] = buf[:count]
                buf = grown
            buf[count : count + new.size] = new
            count += new.size
            self._domain_rows_cache[code] = (buf, count, self._n)
        return buf[:count]

    def _domain_ivf(self, code: int, rows: np.ndarray,
                    progress: Callable[[str, int, int], None] | None = None) -> DomainIVF:
        ivf = self._ivf.get(code)
        if ivf is None:
            ivf = self._ivf[code] = DomainIVF(_load_faiss(), self.dim)
        if ivf.stale(self._n, rows.size):
            ivf.sync(self._vecs, rows, self._n, progress)
        return ivf

    def _ann_search(
        self, query: np.ndarray, k: int, tau: float, excluded: np.ndarray, domain: object
    ) -> list[tuple[int, float]] | None:
        """ANN hits, or None when a domain's index found too few allowed items (the
        caller then searches exactly)."""
        self.stats["ann"] += 1
        codes = list(self._domain_n) if domain is ANY_DOMAIN else [self._domains[domain]]
        # over-fetch: the 8-bit scores only shortlist; the exact re-score ranks (and ties)
        fetch = max(4 * k, k + 32)
        shortlist = []
        for code in codes:
            rows = self._domain_rows(code)
            if rows.size < self.ann_threshold:
                shortlist.append(self._exact_shortlist(query, rows, excluded, fetch))
                continue
            ivf = self._domain_ivf(code, rows)
            found = ivf.search(query, fetch, k, self._nprobe(ivf), excluded, self.stats)
            if found is None:
                self.stats["exact_fallback"] += 1
                return None  # very selective filter: the exact search is the cheaper answer
            tail = rows[ivf.rows.size :]  # added since the last sync: scanned exactly
            if excluded.size and tail.size:
                tail = tail[~np.isin(tail, excluded)]
            shortlist += [found, tail]
        rows = np.concatenate(shortlist)
        scores = self._vecs[rows] @ query
        keep = scores >= tau
        return self._rank(rows[keep], scores[keep], k)

    def _exact_shortlist(self, query: np.ndarray, rows: np.ndarray, excluded: np.ndarray,
                         fetch: int) -> np.ndarray:
        """The allowed rows of a small domain scoring at least the ``fetch``-th best."""
        if excluded.size:
            rows = rows[~np.isin(rows, excluded)]
        if rows.size <= fetch:
            return rows
        scores = self._vecs[rows] @ query
        return rows[scores >= np.partition(scores, rows.size - fetch)[rows.size - fetch]]
