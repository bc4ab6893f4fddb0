"""Run folders written directly as Parquet rows (the stored format, no run behind them), for
tests of ``edv compare`` over folders: episodes, model calls, the selection, uses and a
valid ``config.yaml`` — read back through the real views (:func:`results.views.connect`)."""

from __future__ import annotations

import zlib
from pathlib import Path

import yaml

from edv_ray.results.parquet_io import write_rows_atomic
from edv_ray.results.schema import (CALL_SCHEMA, EPISODE_SCHEMA, POOL_SCHEMA, SELECTION_SCHEMA,
                                    USES_SCHEMA)

STAGE_METHOD = {"eval": "no_memory", "infer": "edv", "execute": "edv", "route": "router",
                "rb_execute": "reasoning_bank", "rb_infer": "reasoning_bank"}


def config(run_id: str, methods, agents=("a", "b", "c"), domains=("retail",), seed: int = 0,
           benchmark: str = "tau2", **sections) -> dict:
    cfg = {"run_id": run_id, "seed": seed, "method": list(methods),
           "models": {"m": {"engine": "endpoint", "litellm_model": "openai/m",
                            "api_base": "http://127.0.0.1:9/v1"}},
           "agents": [{"name": a, "model": "m", "prompt_strategy": "native_tools"} for a in agents],
           "benchmark": ({"name": benchmark, "domains": list(domains)} if benchmark == "tau2"
                         else {"name": benchmark, "data_dir": "/nonexistent"}),
           "wandb": {"mode": "disabled"}}
    cfg.update(sections)
    return cfg


def episode(run_id, stage, agent, domain, task_id, success, epoch=0, trial=0, status="ok",
            method=None, started_at=None) -> dict:
    eid = f"{stage}-e{epoch}-{agent}-{domain}-{task_id}-t{trial}"
    started = started_at if started_at is not None else float(zlib.crc32(f"{run_id}/{eid}".encode()))
    return {"stage": stage, "run_id": run_id, "method": method or STAGE_METHOD.get(stage), "epoch": epoch,
            "domain": domain, "task_id": task_id, "task_type": "t", "trial": trial,
            "attempt": 0, "episode_id": eid, "agent": agent, "model": "m", "status": status,
            "success": None if status == "error" else bool(success),
            "reward": None if status == "error" else float(bool(success)),
            "started_at": started}


def call(run_id, stage, role, agent, episode_id, epoch, prompt, completion) -> dict:
    return {"run_id": run_id, "stage": stage, "role": role, "agent": agent, "model": "m",
            "task_id": "x", "trial": 0, "episode_id": episode_id, "epoch": epoch,
            "prompt_tokens": prompt, "completion_tokens": completion, "ok": True, "attempts": 1}


def write_run(folder: Path, cfg: dict, episodes=(), calls=(), test_tasks=(), uses=()) -> Path:
    """``test_tasks``: (domain, task_id) of the test selection; ``uses``: (method, stage,
    epoch, episode_id) rows (default: each episode used by the method that ran it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    write_rows_atomic([{"agent": a["name"], "model": "m", "prompt_strategy": "native_tools",
                        "is_executor": True} for a in cfg["agents"]],
                      folder / "pool" / "agents.parquet", POOL_SCHEMA)
    write_rows_atomic([{"run_id": cfg["run_id"], "selection": "test", "split": "test",
                        "domain": d, "task_id": t, "task_type": "t"} for d, t in test_tasks],
                      folder / "selection" / "part.parquet", SELECTION_SCHEMA)
    for name, rows, schema, key in (("episodes", episodes, EPISODE_SCHEMA, "stage"),
                                    ("llm_calls", calls, CALL_SCHEMA, "stage")):
        by = {}
        for r in rows:
            by.setdefault(r[key], []).append(r)
        for stage, rs in by.items():
            write_rows_atomic([{k: r.get(k) for k in schema.names} for r in rs],
                              folder / name / f"stage={stage}" / "part.parquet", schema)
    # a real run lists every episode a method used; by default each episode is used by
    # the method that ran it
    uses = uses or [(r["method"], r["stage"], r["epoch"], r["episode_id"])
                    for r in episodes if r.get("method")]
    by_method = {}
    for method, stage, epoch, eid in uses:
        by_method.setdefault(method, []).append({"run_id": cfg["run_id"], "stage": stage,
                                                 "epoch": epoch, "episode_id": eid,
                                                 "memory_key": None, "condition": ""})
    for method, rows in by_method.items():
        write_rows_atomic(rows, folder / "uses" / f"method={method}" / "part.parquet", USES_SCHEMA)
    return folder


def stage_episodes(run_id, stage, domain, outcomes: list[bool], agent="a", epoch=0,
                   prefix="t") -> list[dict]:
    """One episode per test task ``{prefix}{i}`` with the given outcomes."""
    return [episode(run_id, stage, agent, domain, f"{prefix}{i}", ok, epoch=epoch)
            for i, ok in enumerate(outcomes)]


def simple_run(root: Path, name: str, outcomes: list[bool], run_id: str | None = None,
               stage="eval", domain="retail", seed=0, benchmark="tau2",
               tasks: list[str] | None = None) -> Path:
    """A one-method run (No-Memory by default), one agent: episode i on test task
    ``tasks[i]`` (default ``t{i}``) with ``outcomes[i]``; every task in ``tasks`` is selected
    (more tasks than outcomes = selected but not scored)."""
    run_id = run_id or name
    ids = tasks if tasks is not None else [f"t{i}" for i in range(len(outcomes))]
    eps = [episode(run_id, stage, "a", domain, t, ok) for t, ok in zip(ids, outcomes)]
    method = STAGE_METHOD[stage]
    cfg = config(run_id, [method], agents=("a",), domains=(domain,), seed=seed,
                 benchmark=benchmark)
    return write_run(root / name, cfg, episodes=eps, test_tasks=[(domain, t) for t in ids])
