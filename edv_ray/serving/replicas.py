"""Which replica of one model serves an episode: sticky, over the healthy replicas
(pure Python, no Ray).

An episode's turns should land on one replica so its prefix cache keeps hitting
(verl keeps conversations on one server for the same reason). :class:`StickyReplicaPicker`
uses rendezvous (highest-random-weight) hashing: every (episode key, replica id) pair
gets a pseudo-random score and the episode goes to the healthy replica with the best
score. Hence

- the same key always maps to the same replica while that replica is healthy;
- distinct keys spread evenly (in proportion to ``weight`` when replicas differ);
- marking a replica down (or removing it) moves only the keys it held, each to its
  second-best replica; marking it up again brings exactly those keys back.

Scores hash the stable replica *id* (e.g. ``glm/agent/0``), not its URL, so when Ray
restarts a replica on a new port :meth:`StickyReplicaPicker.set_url` keeps every assignment.
The picker is thread-safe: episode runners call :meth:`pick` from many threads.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from edv_ray.serving.protocol import ServerInfo

_SCALE = float(1 << 64)


class NoHealthyReplica(RuntimeError):
    """Every replica of the model is marked down."""


def _unit_hash(key: str, replica_id: str) -> float:
    """A pseudo-random number in (0, 1) for one (key, replica) pair, stable across runs."""
    digest = hashlib.blake2b(f"{replica_id}\x00{key}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / _SCALE


def rendezvous_score(key: str, replica_id: str, weight: float = 1.0) -> float:
    """Weighted HRW score: the replica with the highest score wins; a replica of weight w
    wins a share w / sum(weights) of keys (the logarithmic method)."""
    return -weight / math.log(_unit_hash(key, replica_id))


class StickyReplicaPicker:
    """Maps episode keys to the base URLs of one model's replicas."""

    def __init__(
        self,
        replicas: Mapping[str, str] | Iterable[str],
        weights: Mapping[str, float] | None = None,
    ) -> None:
        if isinstance(replicas, Mapping):
            urls = dict(replicas)
        else:  # plain URLs: each URL is its own id
            urls = {u: u for u in replicas}
        if not urls:
            raise ValueError("a replica picker needs at least one replica")
        self._lock = threading.Lock()
        self._urls: dict[str, str] = urls
        self._weights: dict[str, float] = {r: 1.0 for r in urls}
        for rid, w in (weights or {}).items():
            self._set_weight(rid, w)
        self._down: set[str] = set()

    @classmethod
    def from_infos(cls, infos: Iterable[ServerInfo]) -> StickyReplicaPicker:
        return cls({i.server_id: i.base_url for i in infos})

    # ---- picking -------------------------------------------------------------------
    def pick_id(self, episode_key: str) -> str:
        """The id of the healthy replica that owns this key."""
        with self._lock:
            return self._pick_locked(episode_key)

    def pick(self, episode_key: str) -> str:
        """The base URL (``http://host:port/v1``) serving this episode."""
        with self._lock:
            return self._urls[self._pick_locked(episode_key)]

    def ranking(self, episode_key: str) -> list[str]:
        """All replica ids, best first (healthy or not): the failover order of a key."""
        with self._lock:
            return sorted(self._urls, reverse=True,
                          key=lambda r: (rendezvous_score(episode_key, r, self._weights[r]), r))

    def assignment(self, keys: Iterable[str]) -> Counter:
        """How many of these keys each replica id would get (for balance checks, logs)."""
        return Counter(self.pick_id(k) for k in keys)

    # ---- membership and health -----------------------------------------------------
    @property
    def replica_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._urls)

    @property
    def healthy_ids(self) -> list[str]:
        with self._lock:
            return sorted(r for r in self._urls if r not in self._down)

    def url(self, replica_id: str) -> str:
        with self._lock:
            return self._urls[self._known(replica_id)]

    def mark_down(self, replica_id: str) -> None:
        """Stop picking a replica; only its keys move (to their second choice)."""
        with self._lock:
            self._down.add(self._known(replica_id))

    def mark_up(self, replica_id: str) -> None:
        with self._lock:
            self._down.discard(self._known(replica_id))

    def set_url(self, replica_id: str, base_url: str) -> None:
        """A restarted replica answers elsewhere: same id, same keys, new URL; marks it up."""
        with self._lock:
            self._urls[self._known(replica_id)] = base_url
            self._down.discard(replica_id)

    def add(self, replica_id: str, base_url: str, weight: float = 1.0) -> None:
        with self._lock:
            self._urls[replica_id] = base_url
            self._set_weight(replica_id, weight)
            self._down.discard(replica_id)

    def remove(self, replica_id: str) -> None:
        with self._lock:
            self._known(replica_id)
            if len(self._urls) == 1:
                raise ValueError("cannot remove the last replica")
            del self._urls[replica_id]
            self._weights.pop(replica_id, None)
            self._down.discard(replica_id)

    # ---- internals -----------------------------------------------------------------
    def _pick_locked(self, key: str) -> str:
        candidates = [r for r in self._urls if r not in self._down]
        if not candidates:
            raise NoHealthyReplica(f"all {len(self._urls)} replica(s) are marked down")
        return max(candidates, key=lambda r: (rendezvous_score(key, r, self._weights[r]), r))

    def _known(self, replica_id: str) -> str:
        if replica_id not in self._urls:
            raise KeyError(f"unknown replica {replica_id!r}; known: {sorted(self._urls)}")
        return replica_id

    def _set_weight(self, replica_id: str, weight: float) -> None:
        if replica_id not in self._urls:
            raise KeyError(f"weight for unknown replica {replica_id!r}")
        if not weight > 0:
            raise ValueError(f"replica weight must be > 0, got {weight}")
        self._weights[replica_id] = float(weight)
