"""One run, start to end: validate → serve → run the method's stages → report.

Everything a user can get wrong (config, unknown task ids, missing weights,
unreachable endpoints, a task that needs a user simulator) fails here before any
episode starts. A run folder holds the resolved config, Parquet tables, server logs,
the report (CSV + PNG) and W&B's offline files; ``--resume`` continues it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from edv_ray.config import ConfigError, RunConfig, dump_config, load_config
from edv_ray.envs.tau2.tasks import select_tasks, use_solo


@dataclass
class RunContext:
    cfg: RunConfig
    run_id: str
    run_dir: Path
    tasks: dict[str, list]  # domain → τ²-bench tasks
    pool: object  # runtime.servers.ServedPool
    runner: object  # runtime.batch.EpisodeRunner
    console: Console
    show_progress: bool = True


def validate(cfg: RunConfig) -> dict[str, list]:
    """All up-front checks; returns the selected tasks."""
    from edv_ray.runtime.servers import check_models
    from edv_ray.methods import METHODS

    if cfg.method not in METHODS:
        raise ConfigError(f"unknown method {cfg.method!r}; known: {sorted(METHODS)}")
    tasks = method_tasks(cfg)
    if cfg.roles.user_simulator is None:
        needy = [t.id for ts in tasks.values() for t in ts if not use_solo(cfg.benchmark.solo, t)]
        if needy:
            raise ConfigError(
                f"{len(needy)} selected task(s) need a user simulator (e.g. {needy[0]!r}) "
                "but roles.user_simulator is not set"
            )
    check_models(cfg)
    return tasks


def method_tasks(cfg: RunConfig) -> dict[str, list]:
    """Every task the method will touch (EDV: its train and test selections)."""
    if cfg.method != "edv":
        return select_tasks(cfg.benchmark)
    from edv_ray.methods.edv import split_tasks

    e, out = cfg.edv, {}
    for split, ids, n in ((e.train_split, e.train_task_ids, e.num_train_tasks),
                          (e.test_split, e.test_task_ids, e.num_test_tasks)):
        for d, ts in split_tasks(cfg.benchmark, split, ids, n).items():
            known = {t.id for t in out.get(d, [])}
            out.setdefault(d, []).extend(t for t in ts if t.id not in known)
    return out


def prepare(config_path: str | None, resume_dir: str | None) -> tuple[RunConfig, str, Path]:
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"{run_dir} is not a run folder (no config.yaml)")
        cfg = load_config(run_dir / "config.yaml")
        return cfg, cfg.run_id or run_dir.name, run_dir
    return prepare_from(load_config(config_path) if config_path else default_config())


def prepare_from(cfg: RunConfig) -> tuple[RunConfig, str, Path]:
    """A new run of ``cfg``: fix its run id and run folder (which must not exist yet)."""
    run_id = cfg.resolved_run_id()
    cfg = cfg.model_copy(update={"run_id": run_id})
    run_dir = Path(cfg.output_dir) / run_id
    if (run_dir / "config.yaml").exists():
        raise ConfigError(f"run folder {run_dir} exists: use `edv run --resume {run_dir}`")
    return cfg, run_id, run_dir


def default_config() -> RunConfig:
    return load_config(Path(__file__).parent / "default_run.yaml")


def execute(cfg: RunConfig, run_id: str, run_dir: Path, console: Console | None = None,
            show_progress: bool = True) -> dict:
    from edv_ray.methods import METHODS
    from edv_ray.report.tables import report
    from edv_ray.report.tracking import log_run
    from edv_ray.results.store import RunStore
    from edv_ray.runtime.batch import EpisodeRunner
    from edv_ray.runtime.ray_setup import init_ray
    from edv_ray.runtime.servers import launch_servers

    console = console or Console()
    tasks = validate(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    store = RunStore(run_dir)
    store.write_pool([
        {"agent": a.name, "model": a.model, "prompt_strategy": a.prompt_strategy,
         "is_executor": a.name in cfg.executor_names()} for a in cfg.agents
    ])
    init_ray(cfg.runtime)
    console.print(f"[bold]run[/] {run_id} → {run_dir}")
    pool = launch_servers(cfg, run_dir)
    (run_dir / "servers.json").write_text(json.dumps([i.model_dump() for i in pool.infos], indent=1))
    runner = None
    try:
        runner = EpisodeRunner(cfg, str(run_dir))
        ctx = RunContext(cfg, run_id, run_dir, tasks, pool, runner, console, show_progress)
        METHODS[cfg.method](ctx)
    finally:
        if runner is not None:
            runner.shutdown()
        pool.stop()
    tables = report(run_dir, console=console)
    log_run(cfg, run_id, run_dir, tables)
    return tables
