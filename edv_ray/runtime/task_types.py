"""Task types for the Ability Matrix and the Model Selector, fixed once per run.

``benchmark.task_type_key`` (τ²-bench):

* ``domain`` — one type per domain (the paper's coarsest key);
* ``domain_task_prefix`` — the domain plus the task id's prefix (meaningful only where
  ids carry a family name, e.g. ``mock``'s ``create_task_1``; on airline/retail the ids
  are numbers and every task becomes its own type — refused there);
* ``observed_cluster`` — types from what the solving agent observes before it acts
  (the ticket in solo mode; Mind2Web's task text; MMTB's first user turn): the texts of
  the *training* tasks of a domain are embedded and clustered (k-means, ``n_task_types``
  clusters, seeded), and every task — training and test — gets the nearest cluster. A
  task with nothing observable before the episode (a τ²-bench conversation, whose first
  user message only exists once the simulator speaks) keeps its domain as type; the
  validity check ``task_types`` reports how many did.

The mapping is written to ``task_types/part.parquet`` (run_id, domain, task_id,
task_type, basis) and read back on resume, so a run never re-types its tasks; the
centroids go to ``task_types/centroids.parquet``. A run with ``memory_from`` types its
tasks with the source run's centroids, so its routing reads the source's Ability Matrix
rows by the same names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from edv_ray.results.parquet_io import read_rows, write_rows_atomic
from edv_ray.results.schema import TASK_TYPE_SCHEMA

Key = tuple[str, str]


class TaskTypes:
    def __init__(self, mapping: dict[Key, tuple[str, str]]) -> None:
        self._map = mapping  # (domain, task_id) → (task_type, basis)

    def __call__(self, domain: str, task) -> str:
        return self._map[(domain, task.id)][0]

    def basis(self, domain: str, task_id: str) -> str:
        return self._map[(domain, task_id)][1]

    @classmethod
    def build(cls, cfg, env, run_id: str, run_dir: Path, selected: dict[str, dict[str, list]]
              ) -> "TaskTypes":
        """``selected``: {"test": domain → tasks, "train": domain → tasks}."""
        path = Path(run_dir) / "task_types" / "part.parquet"
        stored = read_rows(path)
        if stored:
            return cls({(r["domain"], r["task_id"]): (r["task_type"], r["basis"]) for r in stored})
        b = cfg.benchmark
        key = getattr(b, "task_type_key", "domain")
        every: dict[str, dict[str, object]] = {}
        for which in ("train", "test"):
            for d, ts in selected.get(which, {}).items():
                for t in ts:
                    every.setdefault(d, {})[t.id] = t
        mapping: dict[Key, tuple[str, str]] = {}
        centroids: dict[str, np.ndarray] = {}
        source = _source_centroids(cfg) if key == "observed_cluster" else {}
        for d, tasks in every.items():
            if key == "observed_cluster":
                train_ids = [t.id for t in selected.get("train", {}).get(d, [])]
                got, centroids[d] = _clusters(env, b, d, tasks, train_ids, cfg.seed,
                                              getattr(b, "n_task_types", 4), source.get(d))
                mapping.update(got)
            else:
                mapping.update({(d, tid): (env.task_type(b, d, t), key) for tid, t in tasks.items()})
        write_rows_atomic([dict(domain=d, cluster=j, vector=c[j].tolist())
                           for d, c in sorted(centroids.items()) if c is not None
                           for j in range(len(c))],
                          path.parent / CENTROIDS, CENTROID_SCHEMA)
        write_rows_atomic([dict(run_id=run_id, domain=d, task_id=tid, task_type=tt, basis=basis)
                           for (d, tid), (tt, basis) in sorted(mapping.items())],
                          path, TASK_TYPE_SCHEMA)
        return cls(mapping)


CENTROIDS = "centroids.parquet"
CENTROID_SCHEMA = pa.schema([("domain", pa.string()), ("cluster", pa.int32()),
                             ("vector", pa.list_(pa.float32()))])


def _source_centroids(cfg) -> dict[str, np.ndarray]:
    """``memory_from``: the source run's centroids per domain (none: learn our own)."""
    if not cfg.memory_from:
        return {}
    rows = read_rows(Path(cfg.memory_from) / "task_types" / CENTROIDS)
    out: dict[str, list] = {}
    for r in sorted(rows, key=lambda r: (r["domain"], r["cluster"])):
        out.setdefault(r["domain"], []).append(r["vector"])
    return {d: np.asarray(v, dtype=np.float32) for d, v in out.items()}


def _clusters(env, bench, domain: str, tasks: dict[str, object], train_ids: list[str],
              seed: int, k: int, given: np.ndarray | None = None
              ) -> tuple[dict[Key, tuple[str, str]], np.ndarray | None]:
    """k-means over the embedded pre-episode texts of the domain's training tasks (or the
    ``given`` centroids); every task with such a text gets its nearest centroid, the
    others keep the domain. Returns the mapping and the centroids."""
    from edv_ray.memory.embeddings import Embedder

    texts = {tid: env.pre_episode_text(bench, t) for tid, t in tasks.items()}
    known = {tid: x for tid, x in texts.items() if x and x.strip()}
    out = {(domain, tid): (domain, "domain (nothing observed before the episode)")
           for tid in tasks if tid not in known}
    train = [tid for tid in train_ids if tid in known]
    if not known:
        return out, None
    if given is None and not train:  # no training text to learn types from: one type
        out.update({(domain, tid): (domain, "domain (no training text)") for tid in known})
        return out, None
    ids = sorted(known)
    vecs = Embedder().embed([known[t] for t in ids]).astype(np.float32)
    row = {tid: i for i, tid in enumerate(ids)}
    centroids = given if given is not None else _kmeans(
        vecs[[row[t] for t in train]], min(k, len(train)), seed)
    nearest = np.argmax(vecs @ centroids.T, axis=1)
    out.update({(domain, tid): (f"{domain}:c{int(nearest[row[tid]])}", "observed_cluster")
                for tid in ids})
    return out, centroids


def _kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Spherical k-means (faiss), seeded; unit-norm centroids."""
    import faiss

    if k <= 1:
        c = x.mean(axis=0, keepdims=True)
    else:
        km = faiss.Kmeans(x.shape[1], k, niter=25, seed=seed, spherical=True, verbose=False,
                          min_points_per_centroid=1)
        km.train(np.ascontiguousarray(x))
        c = km.centroids
    return c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
