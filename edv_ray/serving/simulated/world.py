"""The benchmarks a simulated server plays: tasks by (domain, task id), their planted
types, and what τ²-bench's tools are (write tools decide how a run can fail).

The server is given the benchmark sections of the runs it serves; τ²-bench needs none
(its data ships in the wheel), Mind2Web and MMTB need theirs (their data folders).
"""

from __future__ import annotations

import threading
from typing import Any

from edv_ray.config import TAU2_DOMAINS, Tau2Benchmark, parse_benchmark
from edv_ray.config_simulation import SimulationProfile


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
        self._writes: dict[str, set[str]] = {}
        self._foreign: dict[str, list] = {}

    def bench(self, domain: str):
        name = "tau2" if domain in TAU2_DOMAINS else domain
        if name == "tau2":
            return self.benches.get("tau2") or Tau2Benchmark(domains=[domain])
        if name not in self.benches:
            raise KeyError(f"the simulated server was started without a {name!r} benchmark "
                           f"section (it has {sorted(self.benches)})")
        return self.benches[name]

    def env(self, domain: str):
        from edv_ray.envs.protocol import get_env

        return get_env(self.bench(domain).name)

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

    # ---- τ²-bench ---------------------------------------------------------------------
    def write_tools(self, domain: str) -> set[str]:
        """Names of the domain's write tools (the agent's and the user's)."""
        with self._lock:
            if domain in self._writes:
                return self._writes[domain]
        from tau2.environment.toolkit import ToolType

        from edv_ray.envs.tau2.tasks import domain_state

        env = domain_state(domain).fresh_env()
        names = set()
        for kit in (env.tools, env.user_tools):
            if kit is not None:
                names |= {n for n in kit.get_tools() if kit.tool_type(n) == ToolType.WRITE}
        with self._lock:
            return self._writes.setdefault(domain, names)

    def foreign_write(self, domain: str, task_id: str):
        """A gold write of another task of the domain (first in task order), or None."""
        with self._lock:
            cached = self._foreign.get(domain)
        if cached is None:
            from edv_ray.envs.tau2.tasks import load_domain_tasks

            writes = self.write_tools(domain)
            cached = [(t.id, a.name, dict(a.arguments)) for t in load_domain_tasks(domain, "all")
                      for a in (t.evaluation_criteria.actions or [])
                      if a.requestor == "assistant" and a.name in writes]
            with self._lock:
                self._foreign[domain] = cached
        return next(((name, args) for tid, name, args in cached if tid != task_id), None)
