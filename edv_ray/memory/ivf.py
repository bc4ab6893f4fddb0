"""One domain's faiss IVF index inside a :class:`~edv_ray.memory.index.PartitionIndex`.

The domain filter is structural: every domain of a partition large enough for ANN search
has its own IVF index over its own rows, so a filtered search scans only lists of that
domain (a shared index would spend most of every probed list on other domains' codes and
need several times more probes for the same recall). What remains to filter inside the
search is leave-one-task-out, a handful of rows, applied as an ``IDSelectorBitmap``.

Codes are 8-bit scalar-quantised (``IndexIVFScalarQuantizer``, inner product: a quarter of
the float32 memory, ~3x faster to scan); the caller re-scores the shortlist exactly from
its float32 rows. faiss ids are positions in :attr:`DomainIVF.rows` (the domain's global
rows in insertion order, which only grows), so a local id maps back with one gather.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

RETRAIN_GROWTH = 4  # retrain the quantizer when the domain grew this much
TAIL_ROWS = 1024  # rows added since the last sync are scanned exactly until this many
MIN_LIST_ROWS = 40  # faiss wants ~40 training rows per list


def choose_nlist(n: int) -> int:
    """IVF list count: the power of two nearest 8*sqrt(n) (~100 rows a list at 400k), at
    least 16 and at most one list per 40 rows. Short lists and more probes beat long lists
    and few probes for the same work: on 387k embedding-like rows (one domain of the 1M
    bench bank) 4,096 lists at nprobe 32 gave recall@5 0.964 in 0.58 ms, while 1,024 lists
    needed nprobe 32 for 0.943 in 1.4 ms."""
    target = max(16.0, 8.0 * np.sqrt(max(n, 1)))
    return max(1, min(int(2 ** round(np.log2(target))), n // MIN_LIST_ROWS))


NPROBE = 32


def default_nprobe(nlist: int) -> int:
    """Lists probed first: 32 (all of them below that). Recall depends on how many lists a
    query's neighbours spread over, which hardly grows with the list count: in the bench,
    32 probes gave recall@5 0.957 at 1M items (4,096 lists a domain) in 1.0 ms, while 1/128
    of the lists (8–9 at 100k) gave only 0.88."""
    return min(NPROBE, nlist)


class DomainIVF:
    def __init__(self, faiss, dim: int) -> None:
        self._faiss, self.dim = faiss, dim
        self.ann = None
        self._quantizer = None  # kept alive alongside ann
        self.trained_n = 0
        self.rows = np.zeros(0, dtype=np.int64)  # local id -> global row
        self.synced_upto = 0  # global row count at the last sync: later rows are the tail

    @property
    def nlist(self) -> int:
        return int(self.ann.nlist) if self.ann is not None else 0

    def stale(self, n_global: int, n_domain: int) -> bool:
        return (self.ann is None or n_domain >= RETRAIN_GROWTH * self.trained_n
                or n_global - self.synced_upto >= TAIL_ROWS)

    def sync(self, vecs: np.ndarray, domain_rows: np.ndarray, n_global: int,
             progress: Callable[[str, int, int], None] | None = None) -> None:
        """Bring the index up to ``domain_rows`` (all rows of the domain, increasing)."""
        faiss, n = self._faiss, int(domain_rows.size)
        if self.ann is None or n >= RETRAIN_GROWTH * self.trained_n:
            nlist = choose_nlist(n)
            quantizer = faiss.IndexFlatIP(self.dim)
            ann = faiss.IndexIVFScalarQuantizer(
                quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                faiss.METRIC_INNER_PRODUCT)
            ann.cp.niter, ann.cp.seed = 12, 1234
            n_train = min(n, MIN_LIST_ROWS * nlist)
            sample = np.sort(np.random.default_rng(0).choice(n, size=n_train, replace=False))
            if progress:
                progress("train", 0, n_train)
            ann.train(np.ascontiguousarray(vecs[domain_rows[sample]]))
            self.ann, self._quantizer, self.trained_n = ann, quantizer, n
        added, step = int(self.ann.ntotal), 65_536
        for lo in range(added, n, step):
            self.ann.add(np.ascontiguousarray(vecs[domain_rows[lo : min(lo + step, n)]]))
            if progress:
                progress("add", min(lo + step, n) - added, n - added)
        self.rows, self.synced_upto = domain_rows.copy(), n_global

    def search(self, query: np.ndarray, fetch: int, k: int, nprobe: int,
               excluded: np.ndarray, stats: dict[str, int]) -> np.ndarray | None:
        """Global rows of up to ``fetch`` approximate best allowed items (rows synced so
        far), or None when fewer than ``k`` allowed items turn up even with 1/8 of the
        lists probed (the caller then searches exactly). Extra probe rounds are counted
        in ``stats["reprobe"]``."""
        faiss = self._faiss
        params = faiss.SearchParametersIVF()
        bits = self._allowed_bits(excluded)
        if bits is not None:
            params.sel = faiss.IDSelectorBitmap(bits.size, faiss.swig_ptr(bits))
        q = np.ascontiguousarray(query[None, :])
        nlist = self.nlist
        while True:
            params.nprobe = nprobe
            _, ids = self.ann.search(q, fetch, params=params)  # `bits` alive until here
            local = ids[0][ids[0] >= 0]
            if local.size >= k:
                return self.rows[local]
            if nprobe >= nlist // 8:
                return None
            stats["reprobe"] += 1
            nprobe = min(nprobe * 4, nlist)

    def _allowed_bits(self, excluded: np.ndarray) -> np.ndarray | None:
        """Packed little-endian bitmap over local ids with the excluded rows cleared."""
        if excluded.size == 0:
            return None
        pos = np.searchsorted(self.rows, excluded)
        hit = pos < self.rows.size
        pos = pos[hit][self.rows[pos[hit]] == excluded[hit]]
        if pos.size == 0:
            return None
        bits = np.full((self.rows.size + 7) // 8, 0xFF, dtype=np.uint8)
        np.bitwise_and.at(bits, pos >> 3, np.invert(np.left_shift(1, pos & 7).astype(np.uint8)))
        return bits
