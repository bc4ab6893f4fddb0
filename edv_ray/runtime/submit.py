"""Submit a run to a Ray cluster through Ray Jobs (the cluster path).

The config is validated here, then uploaded as the job's ``working_dir`` and run on the
cluster with ``edv run config.yaml`` (the job's Ray address is set by Ray Jobs, so the
run joins that cluster). The run folder must be on storage the cluster writes to and you
can read: an absolute path on a shared filesystem (e.g. ``/mnt/runs``).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from edv_ray.commands import command, resume_command
from edv_ray.config import ConfigError, dump_config, load_config


def entrypoint(resume_dir: str | None, accept_changed: bool = False) -> str:
    """The job's command line. Ray Jobs runs it through ``/bin/sh -c``: every value in it
    is quoted, so a run folder named ``/x; touch PWNED #`` or ``/my runs/a`` reaches
    ``edv`` as one argument (the staged config is always ``config.yaml``)."""
    if resume_dir is not None:
        return resume_command(resume_dir, "--no-progress",
                              *(["--accept-changed"] if accept_changed else []))
    return command("edv", "run", "--no-progress", "config.yaml")


def submit_run(config_path: str, address: str, wait: bool = True, resume_dir: str | None = None,
               timeout_s: float = 3600.0, echo=print, accept_changed: bool = False) -> tuple[str, str]:
    """Returns (job id, final status or "SUBMITTED")."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    entry = entrypoint(resume_dir, accept_changed)
    if resume_dir is not None:
        staged = None
    else:
        cfg = load_config(config_path)
        if not Path(cfg.output_dir).is_absolute():
            raise ConfigError(
                f"output_dir {cfg.output_dir!r} is relative: on a cluster it would land in the "
                "job's temporary working dir; use an absolute path on shared storage")
        staged = Path(tempfile.mkdtemp(prefix="edv-submit-"))
        dump_config(cfg, staged / "config.yaml")
    try:
        client = JobSubmissionClient(address)
    except Exception as err:
        raise ConfigError(f"cannot reach the Ray Jobs server at {address}: {err}") from None
    runtime_env = {"working_dir": str(staged)} if staged else {}
    # a freshly started head answers "No available agent" until its job agent is up
    job_id = Retrying(stop=stop_after_delay(120), wait=wait_fixed(2), reraise=True,
                      retry=retry_if_exception(lambda e: "No available agent" in str(e)))(
        client.submit_job, entrypoint=entry, runtime_env=runtime_env)
    echo(f"submitted {job_id}: {entry}")
    if staged:
        shutil.rmtree(staged, ignore_errors=True)
    if not wait:
        return job_id, "SUBMITTED"
    deadline = time.monotonic() + timeout_s
    status = client.get_job_status(job_id)
    while status not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        if time.monotonic() > deadline:
            break
        time.sleep(2.0)
        status = client.get_job_status(job_id)
    if status != JobStatus.SUCCEEDED:
        echo(client.get_job_logs(job_id)[-4000:])
    return job_id, str(status.value if hasattr(status, "value") else status)
