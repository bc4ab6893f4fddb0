"""One W&B run per run folder, many of them in one process (a sweep's parallel variants).

* **Identity.** A run folder's W&B id is ``<run_id>-<8 random hex digits>``, made the
  first time the folder logs and kept in ``RUN_DIR/wandb/edv-run.json``. Resuming the
  folder resumes its W&B run (``resume="allow"`` with the stored id); a new run with the
  same ``run_id`` (another output folder, or the folder deleted and run again) is a new
  W&B run — never appended to the old one.
* **Steps.** Every ``log`` carries an explicit step, continued from the stored next step:
  an offline W&B run cannot learn where a resumed run stopped and would restart ``_step``
  at 0 (online, W&B's own step is used when it is further on).
* **The service.** W&B's service is shared by every run of the process, and
  ``wandb.teardown()`` — the only call that waits until the service has written a run's
  files (``run.finish()`` returns before that: a reader right after it found records
  missing) — finishes every open run. So it runs only when the last open run of the
  process closes: a sweep variant that ends first no longer ends its siblings' tracking.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE = Path("wandb") / "edv-run.json"
SETTINGS = dict(console="off", x_disable_stats=True, quiet=True, silent=True,
                reinit="create_new", init_timeout=60.0)

_LOCK = threading.Lock()  # held around init and teardown: no run starts mid-teardown
_open_runs = 0  # W&B runs of this process started and not yet closed


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The folder's stored W&B identity (``{}`` when it never logged)."""
    path = Path(run_dir) / STATE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("id"), str) else {}


def new_id(run_id: str) -> str:
    return f"{run_id[:100]}-{secrets.token_hex(4)}"


@dataclass
class Session:
    """An open W&B run of one run folder; ``log`` numbers the steps."""

    run: Any
    run_dir: Path
    wandb_id: str
    step: int

    def log(self, data: dict) -> None:
        self.run.log(data, step=self.step)
        self.step += 1
        self.save()

    def save(self) -> None:
        path = self.run_dir / STATE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": self.wandb_id, "next_step": self.step}))
        os.replace(tmp, path)


def start(project: str, run_id: str, run_dir: str | Path, mode: str, config: dict,
          group: str | None) -> Session:
    """Open the folder's W&B run: its stored one (resumed) or a new one."""
    import wandb

    global _open_runs
    run_dir = Path(run_dir)
    state = read_state(run_dir)
    wandb_id = state.get("id") or new_id(run_id)
    with _LOCK:
        run = wandb.init(project=project, name=run_id, id=wandb_id, dir=str(run_dir),
                         mode=mode, config=config, group=group,
                         resume="allow" if state else None, settings=wandb.Settings(**SETTINGS))
        _open_runs += 1
    next_step = state.get("next_step", 0)
    session = Session(run, run_dir, wandb_id,
                      max(next_step if isinstance(next_step, int) else 0, run.step))
    session.save()
    return session


def close(session: Session, exit_code: int) -> None:
    """Finish the W&B run; when it was the process's last open run, wait for W&B's files."""
    global _open_runs
    try:
        session.run.finish(exit_code=exit_code)
    finally:
        with _LOCK:
            _open_runs -= 1
            if _open_runs == 0:
                flush_files()


def flush_files() -> None:
    """Wait until W&B's service has written every run's files (see the module docstring)."""
    import wandb

    wandb.teardown()
