"""results.cpu_use: a container's CPU quota read from its cgroup (v2 and v1, at the
process's cgroup or a parent), and the gate reading a worker as CPU-bound when its
container has used its quota though the host has idle cores."""

from __future__ import annotations

import time
from pathlib import Path

from edv_ray.results.cpu_use import CgroupQuota, CpuUse


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _proc(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "proc_self_cgroup"
    p.write_text(text)
    return p


def test_a_v2_quota_set_on_a_parent_of_the_process_cgroup(tmp_path):
    root = tmp_path / "cg"
    _write(root / "cgroup.controllers", "cpu memory\n")
    _write(root / "kubepods/pod1/ctr/cpu.max", "max 100000\n")  # the container: no limit
    _write(root / "kubepods/pod1/cpu.max", "150000 100000\n")  # its pod: 1.5 cores
    _write(root / "kubepods/pod1/cpu.stat", "usage_usec 5000000\nuser_usec 4000000\n")
    quota = CgroupQuota.find(root, _proc(tmp_path, "0::/kubepods/pod1/ctr\n"))
    assert quota is not None and quota.cores == 1.5 and quota.usage_s() == 5.0


def test_a_v1_quota_as_a_container_sees_it(tmp_path):
    root = tmp_path / "cg"
    _write(root / "cpu/cpu.cfs_quota_us", "200000\n")
    _write(root / "cpu/cpu.cfs_period_us", "100000\n")
    _write(root / "cpuacct/cpuacct.usage", "3000000000\n")
    proc = _proc(tmp_path, "4:memory:/x\n3:cpu:/\n2:cpuacct:/\n1:name=systemd:/\n0::/\n")
    quota = CgroupQuota.find(root, proc)
    assert quota is not None and quota.cores == 2.0 and quota.usage_s() == 3.0


def test_no_quota_or_nothing_readable_means_none(tmp_path):
    v1 = tmp_path / "v1"
    _write(v1 / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")  # this machine's kind: no limit
    _write(v1 / "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    _write(v1 / "cpu,cpuacct/cpuacct.usage", "1\n")
    assert CgroupQuota.find(v1, _proc(tmp_path, "2:cpu,cpuacct:/\n0::/\n")) is None
    v2 = tmp_path / "v2"
    _write(v2 / "cgroup.controllers", "cpu\n")
    _write(v2 / "cpu.max", "max 100000\n")
    assert CgroupQuota.find(v2, _proc(tmp_path, "0::/\n")) is None
    assert CgroupQuota.find(v2, tmp_path / "no_such_file") is None


class _Quota:
    """A container quota whose usage grows at ``rate`` cores (its other processes)."""

    def __init__(self, cores: float, rate: float) -> None:
        self.cores, self.rate, self.t0 = cores, rate, time.monotonic()

    def usage_s(self) -> float:
        return self.rate * (time.monotonic() - self.t0)


def _two_idle_host_cores() -> float:
    return 2.0 * time.monotonic()


def test_a_container_that_used_its_quota_is_cpu_bound_though_the_host_is_idle():
    """A KubeRay pod at its limit: the host's idle cores are not the worker's to use."""
    full = CpuUse(window_s=0.05, idle_s=_two_idle_host_cores, quota=_Quota(1.0, rate=1.0))
    room = CpuUse(window_s=0.05, idle_s=_two_idle_host_cores, quota=_Quota(1.0, rate=0.0))
    host_only = CpuUse(window_s=0.05, idle_s=_two_idle_host_cores, quota=None)
    time.sleep(0.1)
    assert full.update() > 0.9  # nothing left in its quota: all it could have had
    assert room.update() < 0.5
    assert host_only.update() < 0.5  # what the gate read before: the host's idle cores


def test_unreadable_or_odd_cgroup_files_never_fail_a_write(tmp_path):
    """The gate is an optimisation: a quota it cannot read is no quota, never an error."""
    assert CgroupQuota.find(tmp_path, _proc(tmp_path, "garbage without colons\n")) is None
    root = tmp_path / "cg"
    _write(root / "cgroup.controllers", "cpu\n")
    _write(root / "cpu.max", "lots 100000\n")
    assert CgroupQuota.find(root, _proc(tmp_path, "0::/\n")) is None
    _write(root / "cpu.max", "100000 100000\n")
    _write(root / "cpu.stat", "user_usec 1\n")  # no usage_usec
    assert CgroupQuota.find(root, _proc(tmp_path, "0::/\n")) is None
    _write(root / "cpu.stat", "usage_usec 1\n")
    quota = CgroupQuota.find(root, _proc(tmp_path, "0::/\n"))
    assert quota is not None and quota.cores == 1.0
    use = CpuUse(window_s=0.05, idle_s=_two_idle_host_cores, quota=quota)
    (root / "cpu.stat").unlink()  # the cgroup went away under a running worker
    time.sleep(0.1)
    assert use.update() < 0.5 and use.quota is None  # measured on the node's idle time alone
