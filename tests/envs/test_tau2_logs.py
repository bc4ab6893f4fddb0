"""τ²-bench's tool-implementation notices reach the console once per run; every record
is in ``<run>/logs/benchmark.log``; other warnings and errors still reach the console
(``edv_ray/envs/benchmark_logs.py``, set up in every episode worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTICE = "Seats release not implemented for cancellation!!!"
# a worker process: the same setup the episode worker calls, then real airline tool calls
# (each cancellation logs the notice), a real τ²-bench warning that is no tool notice (a
# tool without a docstring), and an error record
WORKER = """
import sys
from edv_ray.envs.benchmark_logs import route_benchmark_logs
route_benchmark_logs(sys.argv[1])
from loguru import logger
from tau2.environment.tool import as_tool
from edv_ray.envs.tau2.tasks import domain_state

env = domain_state("airline").fresh_env()
for rid in list(env.tools.db.reservations)[:int(sys.argv[2])]:
    env.make_tool_call("cancel_reservation", requestor="assistant", reservation_id=rid)
def undocumented(x: int) -> int:
    return x
as_tool(undocumented).openai_schema
logger.error("worker failed: disk full")
"""


def _worker(run_dir: Path, cancellations: int) -> str:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env.pop("LOGURU_LEVEL", None)
    out = subprocess.run([sys.executable, "-c", WORKER, str(run_dir), str(cancellations)],
                         capture_output=True, text=True, timeout=240, env=env,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tool_notice_once_per_run_every_occurrence_in_the_log(tmp_path):
    first = _worker(tmp_path, 4)
    assert first.count(NOTICE) == 1  # four cancellations, one console line
    assert "shown once; every occurrence: " + str(tmp_path / "logs" / "benchmark.log") in first
    assert first.count("Tool undocumented has no description.") == 1  # a real warning
    assert "worker failed: disk full" in first  # errors always
    assert "No .env file found" not in first  # import notices never
    second = _worker(tmp_path, 3)  # another worker of the same run
    assert NOTICE not in second
    assert "worker failed: disk full" in second
    log = (tmp_path / "logs" / "benchmark.log").read_text(encoding="utf-8")
    assert log.count(NOTICE) == 7  # every occurrence, both processes
    assert log.count("tau2.domains.airline.tools:cancel_reservation") == 7
    assert log.count("worker failed: disk full") == 2


def test_tool_notice_rule():
    from edv_ray.envs.benchmark_logs import OncePerRun, is_tool_notice

    class Level:
        def __init__(self, no):
            self.no = no

    assert is_tool_notice({"level": Level(30), "name": "tau2.domains.airline.tools"})
    assert not is_tool_notice({"level": Level(40), "name": "tau2.domains.airline.tools"})
    assert not is_tool_notice({"level": Level(30), "name": "tau2.environment.tool"})
    once = OncePerRun(None)
    assert once.first("a") and not once.first("a") and once.first("b")
