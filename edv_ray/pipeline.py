"""One run, start to end: validate → serve → run each method's stages → report.

Everything a user can get wrong (config, unknown task ids, missing weights,
unreachable endpoints, a task that needs a user simulator, a policy that cannot fit a
model's context) fails here before any episode starts. A run folder holds the resolved
config, Parquet tables, server logs, the report (CSV + PNG) and W&B's offline files;
``--resume`` continues it. This module knows no method or benchmark by name: methods
come from :mod:`edv_ray.methods.registry`, benchmarks from :mod:`edv_ray.envs.protocol`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from edv_ray.commands import resume_command
from edv_ray.config import ConfigError, RunConfig, dump_config, load_config


@dataclass
class RunContext:
    cfg: RunConfig
    run_id: str
    run_dir: Path
    env: object  # envs.protocol.Environment
    pool: object  # runtime.servers.ServedPool
    runner: object  # runtime.batch.EpisodeRunner
    console: Console
    tracker: object  # report.tracking.Tracker
    show_progress: bool = True
    unfinished: list[str] = field(default_factory=list)  # tasks a method left for --resume
    task_types: object = None  # runtime.task_types.TaskTypes (fixed once per run)

    def task_type(self, domain: str, task) -> str:
        return self.task_types(domain, task)


def selected_tasks(cfg: RunConfig) -> dict[str, list]:
    """Every task the run's methods touch (test selection + training where used)."""
    from edv_ray.envs.protocol import get_env
    from edv_ray.methods.registry import get_method

    env, b = get_env(cfg.benchmark.name), cfg.benchmark
    sels = [(b.split, b.task_ids, b.num_tasks)]
    if any(get_method(m).uses_train for m in cfg.method_names()):
        sels.append((b.train_split, b.train_task_ids, b.num_train_tasks))
    out: dict[str, list] = {}
    for split, ids, n in sels:
        for d, ts in env.select_tasks(b, split, ids, n).items():
            known = {t.id for t in out.get(d, [])}
            out.setdefault(d, []).extend(t for t in ts if t.id not in known)
    return out


def selections(cfg: RunConfig) -> dict[str, tuple[str, dict[str, list]]]:
    """{"test": (split, domain → tasks), "train": ...} — train only where a method uses it."""
    from edv_ray.envs.protocol import get_env
    from edv_ray.methods.registry import get_method

    env, b = get_env(cfg.benchmark.name), cfg.benchmark
    out = {"test": (b.split, env.select_tasks(b, b.split, b.task_ids, b.num_tasks))}
    if any(get_method(m).uses_train for m in cfg.method_names()):
        out["train"] = (b.train_split, env.select_tasks(b, b.train_split, b.train_task_ids,
                                                        b.num_train_tasks))
    return out


def write_selection(cfg: RunConfig, run_id: str, run_dir: Path):
    """Fix the run's task types (``task_types/``) and write ``selection/part.parquet``:
    every task the run selected, test and training, so checks and comparisons know what
    each method should have scored. Returns the run's :class:`TaskTypes`."""
    from edv_ray.envs.protocol import get_env
    from edv_ray.results.parquet_io import write_rows_atomic
    from edv_ray.results.schema import SELECTION_SCHEMA
    from edv_ray.runtime.task_types import TaskTypes

    sels = selections(cfg)
    types = TaskTypes.build(cfg, get_env(cfg.benchmark.name), run_id, run_dir,
                            {k: v[1] for k, v in sels.items()})
    rows = [dict(run_id=run_id, selection=which, split=split, domain=d, task_id=t.id,
                 task_type=types(d, t))
            for which, (split, by_domain) in sels.items()
            for d, ts in by_domain.items() for t in ts]
    write_rows_atomic(rows, run_dir / "selection" / "part.parquet", SELECTION_SCHEMA)
    return types


def check_prompt_budgets(cfg: RunConfig, env, domains: list[str]) -> None:
    """Each agent's model must hold the full policy plus its answer in its real context
    window (:func:`edv_ray.serving.context.model_context`; DESIGN: policies are never
    cut); one clear error naming model and sizes otherwise."""
    from edv_ray.prompts.budget import TEMPLATE_TOKENS, count_tokens
    from edv_ray.serving.context import model_context

    for d in domains:
        policy = count_tokens(env.policy(cfg.benchmark, d))
        for a in cfg.agents:
            n_ctx = model_context(a.model, cfg.models[a.model])
            need = policy + a.sampling.max_tokens + TEMPLATE_TOKENS
            if need > n_ctx:
                raise ConfigError(
                    f"model {a.model!r} (agent {a.name}): the {d} policy (~{policy} tokens) + "
                    f"max_tokens {a.sampling.max_tokens} need ~{need} tokens > n_ctx {n_ctx}")


def validate(cfg: RunConfig) -> dict[str, list]:
    """All up-front checks; returns the selected tasks. Endpoint models without ``n_ctx``
    get the context their server reports, written into ``cfg``."""
    from edv_ray.envs.protocol import get_env
    from edv_ray.methods.memory_from import check_memory_from
    from edv_ray.runtime.ray_setup import check_reachable, cluster_address
    from edv_ray.runtime.servers import check_models
    from edv_ray.serving.context import resolve_contexts

    env = get_env(cfg.benchmark.name)
    tasks = selected_tasks(cfg)
    if cfg.roles.user_simulator is None:
        needy = [t.id for ts in tasks.values() for t in ts
                 if env.needs_user_simulator(cfg.benchmark, t)]
        if needy:
            raise ConfigError(
                f"{len(needy)} selected task(s) need a user simulator (e.g. {needy[0]!r}) "
                "but roles.user_simulator is not set")
    if cluster_address(cfg.runtime) and not Path(cfg.output_dir).is_absolute():
        raise ConfigError(
            f"output_dir {cfg.output_dir!r} is relative: on a Ray cluster every node writes "
            "into the run folder; use an absolute path on storage all nodes share")
    check_memory_from(cfg)  # another run's memory: folder, benchmark, domains, integrity
    check_models(cfg)
    resolve_contexts(cfg)
    check_prompt_budgets(cfg, env, list(tasks))
    if cfg.runtime.ray_address:
        check_reachable(cfg.runtime.ray_address)
    return tasks


@dataclass
class RunResult:
    tables: dict
    errors: int  # episodes whose latest attempt is an infrastructure error
    unfinished: list[str]  # stage steps a method left for --resume

    @property
    def complete(self) -> bool:
        return self.errors == 0 and not self.unfinished


def check_output_dir(path: Path) -> None:
    """The run folder can be made and written: one clear error otherwise (before Ray)."""
    from edv_ray.results.views import check_hive_safe

    check_hive_safe(path)
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"output folder {path}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder {path}: {probe} is not writable")


def prepare(config_path: str | None, resume_dir: str | None) -> tuple[RunConfig, str, Path]:
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        if not (run_dir / "config.yaml").is_file() or not (run_dir / "pool").is_dir():
            raise ConfigError(f"{run_dir} is not an edv run folder (no config.yaml and pool/)")
        cfg = load_config(run_dir / "config.yaml")
        return cfg, cfg.run_id or run_dir.name, run_dir
    return prepare_from(load_config(config_path) if config_path else default_config())


def prepare_from(cfg: RunConfig) -> tuple[RunConfig, str, Path]:
    """A new run of ``cfg``: fix its run id and run folder (which must not exist yet)."""
    run_id = cfg.resolved_run_id()
    cfg = cfg.model_copy(update={"run_id": run_id})
    run_dir = Path(cfg.output_dir) / run_id
    if (run_dir / "config.yaml").exists():
        raise ConfigError(f"run folder {run_dir} exists: use `{resume_command(run_dir)}`")
    return cfg, run_id, run_dir


def default_config() -> RunConfig:
    return load_config(Path(__file__).parent / "default_run.yaml")


def execute(cfg: RunConfig, run_id: str, run_dir: Path, console: Console | None = None,
            show_progress: bool = True, pool=None, accept_changed: bool = False) -> RunResult:
    """Validate, lock the run folder (one writer), serve, run each method, report. A
    ``pool`` (``runtime.servers.ServedPool``) given by the caller — a sweep — is used as
    it is and left running; otherwise the run starts and stops its own servers. A resume
    whose config changes episodes against the settings its finished episodes ran under
    is refused unless ``accept_changed`` (:mod:`edv_ray.results.settings_history`)."""
    from edv_ray.results.run_lock import RunLock, RunLockedError
    from edv_ray.results.settings_history import check_resume

    console = console or Console()
    tasks = validate(cfg)
    check_output_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = RunLock(run_dir).acquire()
    except RunLockedError as err:
        raise ConfigError(str(err)) from None
    try:
        changes = check_resume(cfg, run_dir, accept_changed,
                               {d: [t.id for t in ts] for d, ts in tasks.items()})
        return _execute_locked(cfg, run_id, run_dir, console, show_progress, pool, changes)
    finally:
        lock.release()


def _set_aside_damaged(run_dir: Path, console: Console) -> None:
    from edv_ray.results.integrity import set_aside

    moved, other = set_aside(run_dir)
    for f in moved:
        console.print(f"[yellow]damaged file set aside (its episode runs again): "
                      f"{escape(str(f))}[/]")
    if other:
        raise ConfigError(f"damaged Parquet file(s) in {run_dir}: "
                          + ", ".join(str(f) for f in other[:5]))


def _execute_locked(cfg: RunConfig, run_id: str, run_dir: Path, console: Console,
                    show_progress: bool, shared_pool, changes: list[dict]) -> RunResult:
    from edv_ray.envs.protocol import get_env
    from edv_ray.interrupts import reclaim as reclaim_signals
    from edv_ray.methods.registry import get_method
    from edv_ray.report.tables import report
    from edv_ray.report.tracking import Tracker
    from edv_ray.results.store import RunStore
    from edv_ray.runtime.batch import EpisodeRunner
    from edv_ray.runtime.cluster_view import ServerWatch, show_placement
    from edv_ray.runtime.ray_setup import init_ray
    from edv_ray.results.views import connect
    from edv_ray.results.settings_history import describe
    from edv_ray.results.settings_history import record as record_settings
    from edv_ray.runtime.servers import launch_servers

    _set_aside_damaged(run_dir, console)
    entry = record_settings(cfg, run_dir, changes)  # before config.yaml: the reference
    if entry is not None and changes:
        console.print(f"[yellow]settings {entry['number']} from episode "
                      f"{entry['episodes_before']} on (--accept-changed): "
                      f"{escape(describe(changes))}[/]")
    dump_config(cfg, run_dir / "config.yaml")
    task_types = write_selection(cfg, run_id, run_dir)
    store = RunStore(run_dir)
    store.write_pool([
        {"agent": a.name, "model": a.model, "prompt_strategy": a.prompt_strategy,
         "is_executor": a.name in cfg.executor_names()} for a in cfg.agents
    ])
    init_ray(cfg.runtime)
    reclaim_signals()  # Ray's core worker took SIGTERM over: ours again (interrupts.py)
    console.print(f"[bold]run[/] {escape(run_id)} ({escape(', '.join(cfg.method_names()))})"
                  f" → {escape(str(run_dir))}")

    def plain(msg: str) -> None:  # model names and paths are text, not markup
        console.print(msg, markup=False)

    pool = shared_pool or launch_servers(cfg, run_dir, echo=plain)
    pool.write(run_dir)
    watch = ServerWatch(pool, run_dir, console.print).start()
    runner, tracker = None, Tracker(cfg, run_id, run_dir, console=console)
    try:
        runner = EpisodeRunner(cfg, str(run_dir), servers=pool.actor_by_url,
                               fallbacks=pool.fallbacks())
        show_placement(pool, runner, run_dir, plain)
        ctx = RunContext(cfg, run_id, run_dir, get_env(cfg.benchmark.name), pool, runner,
                         console, tracker, show_progress, task_types=task_types)
        for name in cfg.method_names():
            console.print(f"[bold]method[/] {escape(name)}")
            get_method(name).run(ctx, cfg.section(name))
    except BaseException:
        tracker.abort()
        raise
    finally:
        watch.stop()
        if runner is not None:
            runner.shutdown()
        if shared_pool is None:
            pool.stop()
    from edv_ray.results.store import compact_stage

    stages = {f.name.removeprefix("stage=") for table in ("episodes", "llm_calls")
              for f in (run_dir / table).glob("stage=*")}  # stage jobs' calls have no episodes
    for stage in sorted(stages):  # here: the driver has nothing else to do now, and a Ray
        compact_stage(run_dir, stage)  # task's process start (~1 s) costs more than the
        # few loose files each stage has left (the stages' own compactions ran off_driver)
    tables = report(run_dir, console=console)
    tracker.finish(tables)
    errors = connect(run_dir).execute(
        "SELECT count(*) FROM episodes WHERE status = 'error'").fetchone()[0]
    result = RunResult(tables, errors, list(ctx.unfinished))
    if not result.complete:
        console.print(f"[yellow]incomplete: {errors} episode(s) ended as infrastructure errors, "
                      f"{len(result.unfinished)} stage step(s) unfinished — continue with "
                      f"`{escape(resume_command(run_dir))}`[/]")
    return result
