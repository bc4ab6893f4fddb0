"""Values put into a command line are quoted (issue 28 D1). Ray Jobs runs `edv submit`'s
entrypoint through ``/bin/sh -c``: a run folder named ``/x; touch PWNED #`` ran ``touch``
and a folder with a space was split. Here the entrypoint is run by a real shell against a
stand-in ``edv`` that records its arguments; `tests/runtime/test_ray_jobs.py` submits the
same folders to a real Ray Jobs server."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from edv_ray.commands import resume_command
from edv_ray.runtime.submit import entrypoint

HOSTILE = ["/x; touch {pwned} #", "/my runs/a b", "/r/$(touch {pwned})", "/r/`touch {pwned}`",
           "/r/it's", '/r/"q"', "/r/a\nb", "/r/--help", "-r", "/r/[b]x[/b]"]


@pytest.fixture
def fake_edv(tmp_path) -> Path:
    """An `edv` on PATH that writes the argv it got as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "edv"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("folder", HOSTILE)
def test_submit_entrypoint_passes_the_folder_as_one_argument(tmp_path, fake_edv, folder):
    pwned = tmp_path / "PWNED"
    folder = folder.format(pwned=pwned)
    env = {**os.environ, "PATH": f"{fake_edv}:{os.environ['PATH']}"}
    proc = subprocess.run(["/bin/sh", "-c", entrypoint(folder)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not pwned.exists()
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "run", "--no-progress", "--resume", folder]


def test_submit_entrypoint_of_a_new_run_is_the_staged_config():
    assert shlex.split(entrypoint(None)) == ["edv", "run", "--no-progress", "config.yaml"]


def test_submit_forwards_accept_changed_after_the_folder_is_quoted():
    assert shlex.split(entrypoint("/my runs/a; b", accept_changed=True)) == [
        "edv", "run", "--no-progress", "--accept-changed", "--resume", "/my runs/a; b"]


@pytest.mark.parametrize("folder", HOSTILE)
def test_printed_resume_hint_reads_back_as_the_folder(folder):
    assert shlex.split(resume_command(folder)) == ["edv", "run", "--resume", folder]
