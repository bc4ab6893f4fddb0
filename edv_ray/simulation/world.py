"""The benchmarks a simulated server plays: tasks by (domain, task id), their planted
types, and each benchmark's player (``Environment.simulated_player``), all reached through
:func:`edv_ray.envs.protocol.get_env` — the engine names no benchmark module.

The server is given the benchmark sections of the runs it serves; τ²-bench needs none
(its data ships in the wheel), Mind2Web and MMTB need theirs (their data folders).
"""

from __future__ import annotations

import threading
from typing import Any

from edv_ray.config import TAU2_DOMAINS, Tau2Benchmark, parse_benchmark
from edv_ray.config_simulation import SimulationProfile
from edv_ray.envs.protocol import SimulatedPlayer, get_env


class World:
    def __init__(self, profile: SimulationProfile, benchmarks: list[dict[str, Any]]) -> None:
        self.profile = profile
        self.benches = {}
        for raw in benchmarks:
            b = parse_benchmark(raw)
            self.benches.setdefault(b.name, b)
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, str], Any] = {}
        self._types: dict[tuple[str, str], str] = {}
        self._players: dict[str, SimulatedPlayer] = {}

    def bench(self, domain: str):
        name = "tau2" if domain in TAU2_DOMAINS else domain
        if name == "tau2":
            return self.benches.get("tau2") or Tau2Benchmark(domains=[domain])
        if name not in self.benches:
            raise KeyError(f"the simulated server was started without a {name!r} benchmark "
                           f"section (it has {sorted(self.benches)})")
        return self.benches[name]

    def env(self, domain: str):
        return get_env(self.bench(domain).name)

    def player(self, domain: str) -> SimulatedPlayer:
        """The player of the domain's benchmark."""
        return self._player_of(self.bench(domain).name)

    def _player_of(self, name: str) -> SimulatedPlayer:
        with self._lock:
            if name in self._players:
                return self._players[name]
        player = get_env(name).simulated_player()
        with self._lock:
            return self._players.setdefault(name, player)

    def warm_up(self) -> None:
        """Each served benchmark's player loads what answering needs."""
        for name, bench in self.benches.items():
            self._player_of(name).warm_up(bench)

    def task(self, domain: str, task_id: str):
        key = (domain, task_id)
        with self._lock:
            if key in self._tasks:
                return self._tasks[key]
        task = self.env(domain).task_by_id(self.bench(domain), domain, task_id)
        with self._lock:
            return self._tasks.setdefault(key, task)

    def task_type(self, domain: str, task_id: str) -> str:
        """The planted type (the profile's ``task_types`` rule, then its map)."""
        mapped = self.profile.task_type_map.get(f"{domain}/{task_id}")
        if mapped is not None:
            return mapped
        if self.profile.task_types == "domain":
            return domain
        key = (domain, task_id)
        with self._lock:
            if key in self._types:
                return self._types[key]
        got = self.env(domain).task_type(self.bench(domain), domain, self.task(domain, task_id))
        with self._lock:
            return self._types.setdefault(key, got)

    def type_key(self, domain: str, task_id: str) -> str:
        return f"{domain}/{self.task_type(domain, task_id)}"

    def run_outcome(self, domain: str, task_id: str, transcript: str) -> bool | None:
        """A run's outcome read by its benchmark's player (no marker in the transcript)."""
        return self.player(domain).run_outcome(domain, self.task(domain, task_id), transcript)
