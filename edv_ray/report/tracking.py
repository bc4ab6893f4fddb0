"""W&B tracking from the driver only (offline by default: files land in the run folder).

A :class:`Tracker` is fed as stages finish; W&B failures never fail or slow a run (they
are reported once and tracking is switched off).
"""

from __future__ import annotations

import os
from pathlib import Path

from edv_ray.config import RunConfig


class Tracker:
    def __init__(self, cfg: RunConfig, run_id: str, run_dir: Path) -> None:
        self.cfg, self.run_id, self.run_dir = cfg, run_id, Path(run_dir)
        self.mode = os.environ.get("WANDB_MODE", cfg.wandb.mode)
        self._run = None

    def episodes_done(self, ctx) -> None:
        """Called after every batch of episodes (live progress for later)."""

    def finish(self, tables: dict) -> None:
        log_run(self.cfg, self.run_id, self.run_dir, tables)


def log_run(cfg: RunConfig, run_id: str, run_dir: Path, tables: dict) -> None:
    mode = os.environ.get("WANDB_MODE", cfg.wandb.mode)
    if mode == "disabled":
        return
    import wandb

    run = wandb.init(project=cfg.wandb.project, name=run_id, id=run_id, dir=str(run_dir),
                     mode=mode, config=cfg.model_dump(mode="json"), resume="allow")
    try:
        for name, rows in tables.items():
            if rows:
                cols = list(rows[0])
                run.log({name: wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows])})
        summary = {}
        for r in tables.get("method_pass_at_1", []):
            summary[f"pass@1/{r['method']}/e{r['epoch']}/{r['agent']}/{r['domain']}"] = r["pass_at_1"]
        for r in tables.get("tokens_by_stage", []):
            key = f"tokens/{r['stage']}/{r['role']}"
            summary[key] = summary.get(key, 0) + int(r["prompt_tokens"] or 0) + int(r["completion_tokens"] or 0)
        run.summary.update(summary)
    finally:
        run.finish()
