"""How busy this process is against the CPU it could have had: group commit's gate
(:mod:`edv_ray.results.group_commit` hands a run slot over only while a worker is not
CPU-bound).

Could have had: the worker's share of the node's cores, at most one core (one
interpreter), at most what it used plus what the node left idle (neighbours — an engine,
another worker — may take the rest), and, in a container with a CPU quota (a KubeRay pod's
``limits.cpu``), at most what it used plus what the container's quota left unused: there
the node's idle time is the *host's*, and a worker whose container has used its whole quota
would otherwise read as having cores to spare. The quota is read from the process's cgroup
(v2 ``cpu.max`` and ``cpu.stat``; v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and
``cpuacct.usage``), at the process's own cgroup or the nearest parent that sets one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

CPU_WINDOW_S = 2.0  # the shortest span its CPU use is measured over
_FIND = object()  # CpuUse's default: look the cgroup quota up


class CpuUse:
    """The share (0–1) of the CPU it could have had that this process used, over the span
    since the last measure of at least ``window_s``; ``None`` until one span has passed.
    Used: every thread's CPU (the episodes', the model client's event loop, Ray's,
    Arrow's). ``idle_s``: reads the node's idle CPU-seconds so far (default: the
    operating system's, psutil). ``quota``: the container's CPU quota (default: this
    process's cgroup's, :meth:`CgroupQuota.find`; ``None``: no quota)."""

    def __init__(self, available: float = 1.0, window_s: float = CPU_WINDOW_S,
                 idle_s: Callable[[], float] | None = None, quota=_FIND) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.available, self.window_s = available, window_s
        self._idle_s = idle_s or node_idle_s
        self.quota: CgroupQuota | None = CgroupQuota.find() if quota is _FIND else quota
        self._at, self._cpu, self._idle = time.monotonic(), time.process_time(), self._idle_s()
        self._quota_used = self._quota_usage()
        self.share: float | None = None

    def _quota_usage(self) -> float:
        """The quota's usage so far; a quota whose files stop being readable is dropped
        (the node's idle time alone counts from then on), never an error in a write."""
        if self.quota is None:
            return 0.0
        try:
            return self.quota.usage_s()
        except (OSError, ValueError):
            self.quota = None
            return 0.0

    def update(self) -> float | None:
        now = time.monotonic()
        if now - self._at >= self.window_s:
            cpu, idle = time.process_time(), self._idle_s()
            span = now - self._at
            used = (cpu - self._cpu) / span
            could = min(self.available, 1.0, used + (idle - self._idle) / span)
            quota_used = self._quota_usage()
            if self.quota is not None:
                left = self.quota.cores - (quota_used - self._quota_used) / span
                could = min(could, used + max(0.0, left))
                self._quota_used = quota_used
            self.share = min(1.0, used / could) if could > 0 else 1.0
            self._at, self._cpu, self._idle = now, cpu, idle
        return self.share


def node_idle_s() -> float:
    """CPU-seconds the node's cores have been idle (waiting for I/O included)."""
    import psutil

    t = psutil.cpu_times()
    return t.idle + getattr(t, "iowait", 0.0)


class CgroupQuota:
    """A cgroup's CPU quota: ``cores`` (quota / period) and the CPU-seconds its processes
    have used so far (:meth:`usage_s`)."""

    def __init__(self, cores: float, usage_file: Path, usage_scale: float,
                 usage_key: str | None = None) -> None:
        self.cores, self._file, self._scale, self._key = cores, usage_file, usage_scale, usage_key

    def usage_s(self) -> float:
        text = self._file.read_text()
        if self._key is None:
            return int(text.split()[0]) * self._scale
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == self._key:
                return int(value) * self._scale
        raise ValueError(f"{self._file}: no {self._key}")

    @classmethod
    def find(cls, root: str | Path = "/sys/fs/cgroup",
             proc_cgroup: str | Path = "/proc/self/cgroup") -> CgroupQuota | None:
        """This process's quota (its cgroup's or the nearest parent's), or ``None`` when
        none is set or the files cannot be read or parsed (then only the node's idle time
        counts)."""
        try:
            quota = cls._find(Path(root), Path(proc_cgroup).read_text().splitlines())
            if quota is not None:
                quota.usage_s()  # readable now, or no quota
            return quota
        except (OSError, ValueError):
            return None

    @classmethod
    def _find(cls, root: Path, lines: list[str]) -> CgroupQuota | None:
        v1: dict[str, str] = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controllers == "" and (root / "cgroup.controllers").exists():
                return cls._v2(root, path)
            for name in controllers.split(","):
                v1[name] = path
        if "cpu" in v1 and "cpuacct" in v1:
            return cls._v1(root, v1["cpu"], v1["cpuacct"])
        return None

    @classmethod
    def _v2(cls, root: Path, path: str) -> CgroupQuota | None:
        for d in _up(root, path):
            try:
                quota, period = (d / "cpu.max").read_text().split()[:2]
            except (OSError, ValueError):
                continue
            if quota != "max":
                return cls(int(quota) / int(period), d / "cpu.stat", 1e-6, "usage_usec")
        return None

    @classmethod
    def _v1(cls, root: Path, cpu_path: str, acct_path: str) -> CgroupQuota | None:
        cpu_root = next((root / n for n in ("cpu,cpuacct", "cpu") if (root / n).is_dir()), None)
        acct_root = next((root / n for n in ("cpu,cpuacct", "cpuacct")
                          if (root / n).is_dir()), None)
        if cpu_root is None or acct_root is None:
            return None
        for d in _up(cpu_root, cpu_path):
            try:
                quota = int((d / "cpu.cfs_quota_us").read_text())
                period = int((d / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if quota > 0 and period > 0:
                rel = d.relative_to(cpu_root)
                usage = acct_root / rel / "cpuacct.usage"
                if not usage.exists():  # the accounting hierarchy differs: the process's own
                    usage = acct_root / acct_path.lstrip("/") / "cpuacct.usage"
                return cls(quota / period, usage, 1e-9)
        return None


def _up(mount: Path, path: str) -> list[Path]:
    """The cgroup's folder under ``mount`` and its parents up to the mount (a container
    sees its own cgroup as ``/``; a path that is not there is read as the mount)."""
    d = mount / path.lstrip("/")
    if not d.is_dir():
        d = mount
    out = [d]
    while d != mount and mount in d.parents:
        d = d.parent
        out.append(d)
    return out
