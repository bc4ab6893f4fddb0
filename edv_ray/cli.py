"""``edv`` — run, resume and report.

  edv run [CONFIG.yaml]        no argument = the embedded default (offline, CPU)
  edv run --resume RUN_DIR [--accept-changed]
                               continue a run: finished episodes are kept, missing and
                               errored ones run (errors as a new attempt); a config.yaml
                               edited in ways that change episodes is refused unless
                               --accept-changed (recorded and reported)
  edv report RUN_DIR           re-print the tables from the run's Parquet via DuckDB
  edv validate CONFIG.yaml     check a config (and its models/endpoints) without running
  edv submit CONFIG --address http://HEAD:8265
                               run on a Ray cluster through Ray Jobs
  edv audit RUN_DIR --model-endpoint URL --model NAME [--sample 20]
                               LLM rubric over a sample of each method's memory, plus a
                               CSV sheet for human raters (edv audit-import RUN_DIR FILE.csv)
  edv sweep SWEEP.yaml [--accept-changed]
                               base config × axes, servers started once per model setting
                               (re-run to resume; Ctrl-C stops every variant)
  edv compare RUN_DIR... | SWEEP_DIR [--out DIR] [--pool] [--baseline M] [--epoch N]
                               a row per run × method × agent (runs pooled only with
                               --pool), intervals that know the task clustering, paired
                               comparisons with exact p and the detectable difference,
                               tokens on the same scope, validity checks (Markdown/CSV/PNG)
  edv view RUN_DIR... | SWEEP_DIR [--host 127.0.0.1] [--port 8765] [--html OUT_DIR]
                               a read-only local web viewer (Pass@1, Ability Matrix, every
                               memory item with its votes and sources, every episode's
                               transcript); --html writes a self-contained static export
  edv power CONFIG.yaml | RUN_DIR [--tasks N] [--trials T] [--task-icc R] [--agent-icc R]
                               the chance a planned experiment detects each planted difference
                               (a simulated profile's rates or a pilot run's), and the tasks ×
                               trials it needs for 80 % power
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.markup import escape

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LOGURU_LEVEL", "WARNING")  # τ²-bench logs every step at INFO
os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")  # no "Use W&B Weave" hint per run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edv", description="Execute-Distill-Verify experiments on Ray")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a config (default: the embedded CPU run)")
    r.add_argument("config", nargs="?", help="run config YAML (omit for the embedded default)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--accept-changed", action="store_true",
                   help="resume although config.yaml changes episodes (the change is recorded "
                   "in settings_history.json, W&B and the report)")
    rep = sub.add_parser("report", help="print a run's tables from its Parquet files")
    rep.add_argument("run_dir")
    sj = sub.add_parser("submit", help="submit a run to a Ray cluster (Ray Jobs)")
    sj.add_argument("config", nargs="?", help="run config (output_dir must be absolute/shared)")
    sj.add_argument("--address", required=True, help="Ray Jobs address, e.g. http://HEAD:8265")
    sj.add_argument("--resume", metavar="RUN_DIR", help="resume a run folder on the cluster")
    sj.add_argument("--no-wait", action="store_true", help="return after submitting")
    sj.add_argument("--accept-changed", action="store_true",
                    help="with --resume: as `edv run --resume --accept-changed`")
    sw = sub.add_parser("sweep", help="run a sweep (base config × axes) on shared servers")
    sw.add_argument("sweep", help="sweep YAML (re-run it to resume)")
    sw.add_argument("--no-progress", action="store_true")
    sw.add_argument("--accept-changed", action="store_true",
                    help="resume although the sweep file changed (started variants keep "
                    "the config they started with)")
    c = sub.add_parser("compare", help="compare runs (or a sweep): tables, intervals, plots")
    c.add_argument("paths", nargs="+", help="run folders and/or sweep folders")
    c.add_argument("--out", help="output folder (default: SWEEP/compare or runs/compare-TIME)")
    c.add_argument("--baseline", help="method the others are compared to (default: "
                   "reasoning_bank if present, else no_memory)")
    c.add_argument("--epoch", default="last", help="epoch to score: last (default), all, or N")
    c.add_argument("--boot", type=int, default=10_000, help="bootstrap resamples (>= 1)")
    c.add_argument("--pool", action="store_true",
                   help="pool runs that differ only in their seed into one row (default: a row "
                        "per run)")
    c.add_argument("--allow-mixed-tasks", action="store_true",
                   help="compare runs over different benchmarks or test-task sets (stated in "
                        "the tables; paired differences use the shared tasks)")
    c.add_argument("--allow-invalid", action="store_true",
                   help="compare runs whose validity checks failed (stated in the tables)")
    _power_parser(sub)
    _view_parser(sub)
    v = sub.add_parser("validate", help="validate a config without running it")
    v.add_argument("config", nargs="?")
    from edv_ray.report.memory_audit_cli import add_parsers

    add_parsers(sub)  # edv audit RUN_DIR ... / edv audit-import RUN_DIR FILE.csv
    return p


def _view_parser(sub) -> None:
    w = sub.add_parser("view", help="a read-only local web viewer over runs (or --html: a static export)")
    w.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run folders and/or sweep folders")
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    w.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    w.add_argument("--html", metavar="OUT_DIR", help="write a self-contained static export there and exit")
    w.add_argument("--max-episodes", type=int, default=2000,
                   help="with --html: episode pages exported per run (default: 2000)")


def _view(args, console) -> int:
    """``edv view``: serve the viewer, or with ``--html`` write the static export."""
    from edv_ray.config import ConfigError

    if args.html:
        from edv_ray.view.export import export_html

        index = export_html(args.paths, Path(args.html), max_episodes=max(0, args.max_episodes))
        console.print(f"wrote {escape(str(index))}", markup=True)
        return 0
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: not a port number")
    from edv_ray.view.app import serve

    serve(args.paths, host=args.host, port=args.port,
          echo=lambda text: console.print(text, markup=False, highlight=False))
    return 0


def _power_parser(sub) -> None:
    w = sub.add_parser("power", help="power of a planned experiment, and the tasks it needs")
    w.add_argument("source", help="a run config with engine: simulated models, or a pilot run folder")
    w.add_argument("--tasks", type=int, help="planned tasks (default: the source's test tasks)")
    w.add_argument("--trials", type=int, help="planned trials per task (default: the source's)")
    w.add_argument("--trials-grid", help="trial counts to find the tasks needed for "
                   "(default: 1,2,4 and the design's)")
    w.add_argument("--task-icc", type=float, help="latent correlation of two episodes of a task "
                   "(default: the pilot's estimate; 0 for a profile)")
    w.add_argument("--agent-icc", type=float, help="extra latent correlation of two episodes of a "
                   "task by the same agent (default: the pilot's estimate; 0 for a profile)")
    w.add_argument("--compare", action="append", metavar="A:B",
                   help="a comparison (repeatable; default: edv against each other method)")
    w.add_argument("--reps", type=int, default=2000, help="simulated experiments per point")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--power", type=float, default=0.8, help="target power")
    w.add_argument("--alpha", type=float, default=0.05, help="two-sided level")
    w.add_argument("--test", default="normal", help="normal (the sign-flip test's normal "
                   "approximation, fast) or exact (paired.sign_flip_test per experiment)")
    w.add_argument("--max-tasks", type=int, default=100_000, help="stop the search here")
    w.add_argument("--no-progress", action="store_true")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.markup import escape

    from edv_ray.config import ConfigError

    args = _parser().parse_args(argv)
    from edv_ray.envs.protocol import quiet_logs

    quiet_logs()  # before any benchmark import: warnings only, no import notices
    console = Console(width=None if sys.stdout.isatty() else 160)  # no cut columns in logs
    err = Console(stderr=True, soft_wrap=True)  # one line per error, never wrapped
    try:
        if args.cmd == "report":
            run_dir = Path(args.run_dir)
            if not (run_dir / "episodes").is_dir():
                raise ConfigError(f"{run_dir} has no episodes/ folder: not a run folder")
            _report(run_dir, console)
            return 0
        if args.cmd == "compare":
            return _compare(args, console)
        if args.cmd == "view":
            return _view(args, console)
        if args.cmd == "power":
            from edv_ray.power.run import run_power

            run_power(args, console)
            return 0
        if args.cmd == "sweep":
            return _sweep(args, console, err)
        if args.cmd in ("audit", "audit-import"):
            from edv_ray.report.memory_audit_cli import run_cli

            return run_cli(args, console)
        if args.cmd == "submit":
            from edv_ray.runtime.submit import submit_run

            if bool(args.config) == bool(args.resume):
                raise ConfigError("give a CONFIG or --resume RUN_DIR")
            if args.accept_changed and not args.resume:
                raise ConfigError("--accept-changed applies to --resume RUN_DIR only")
            job_id, status = submit_run(args.config, args.address, wait=not args.no_wait,
                                        resume_dir=args.resume,
                                        accept_changed=args.accept_changed,
                                        echo=lambda text: console.print(text, markup=False))
            console.print(f"job {escape(str(job_id))}: {escape(str(status))}")
            return 0 if status in ("SUCCEEDED", "SUBMITTED") else 1
        from edv_ray import pipeline

        if args.cmd == "validate":
            cfg = (pipeline.load_config(args.config) if args.config else pipeline.default_config())
            tasks = pipeline.validate(cfg)
            n = sum(len(t) for t in tasks.values())
            console.print(f"config OK: {len(cfg.agents)} agents, {n} tasks, "
                          f"method {escape(str(cfg.method))}")
            return 0
        return _run(args, console, err)
    except ConfigError as e:
        err.print(f"[red]error:[/] {escape(str(e))}")  # a folder name is text, not markup
        return 2
    except Exception as e:  # a server that cannot start: one message, its log tail included
        from edv_ray.interrupts import EXIT_STORAGE, describe_storage_error, storage_error
        from edv_ray.serving.embedded import WeightsError
        from edv_ray.serving.process_server import ServerStartError

        cause = getattr(e, "cause", None) or e.__cause__ or e
        if isinstance(e, (ServerStartError, WeightsError)) or isinstance(
                cause, (ServerStartError, WeightsError)):
            err.print(f"[red]error:[/] a model server could not start: {escape(str(cause))}")
            return 3
        disk = storage_error(e)
        if disk is not None:  # disk full, read-only, I/O error: one line
            err.print(f"[red]error:[/] file system: {escape(describe_storage_error(disk))}")
            return EXIT_STORAGE
        raise
    except KeyboardInterrupt as e:
        from edv_ray.interrupts import stopped

        stop = stopped(e)
        err.print(f"interrupted ({stop.name})")
        return stop.exit_code


def _run(args, console, err) -> int:
    """``edv run``: a signal or a storage error ends it with the REAL resume command."""
    from edv_ray import pipeline
    from edv_ray.commands import resume_command
    from edv_ray.config import ConfigError
    from edv_ray.interrupts import (EXIT_STORAGE, describe_storage_error, stop_on_signals,
                                    stopped, storage_error)

    if args.config and args.resume:
        raise ConfigError("give either a CONFIG or --resume RUN_DIR, not both")
    with stop_on_signals():
        cfg, run_id, run_dir = pipeline.prepare(args.config, args.resume)
        resume = resume_command(run_dir)
        try:
            result = pipeline.execute(cfg, run_id, run_dir, console=console,
                                      show_progress=not args.no_progress,
                                      accept_changed=args.accept_changed)
        except KeyboardInterrupt as e:  # a Stopped, or Ray's bare copy of one (see stopped)
            stop = stopped(e)
            if not (run_dir / "config.yaml").is_file():
                err.print(f"stopped by {stop.name} before the run started (nothing written)")
            else:
                err.print(f"stopped by {stop.name}: finished episodes are kept; continue "
                          f"with `{escape(resume)}`")
            return stop.exit_code
        except Exception as e:
            disk = storage_error(e)
            if disk is None or not (run_dir / "config.yaml").is_file():
                raise
            err.print(f"[red]error:[/] the file system stopped the run: "
                      f"{escape(describe_storage_error(disk))}; finished episodes are kept — "
                      f"free space (or fix the folder), then `{escape(resume)}`")
            return EXIT_STORAGE
    console.print(f"run folder: {escape(str(run_dir))}")
    return 0 if result.complete else 4


def _sweep(args, console, err) -> int:
    """Run or resume a sweep: 0 all variants complete, 4 some not, 130 on Ctrl-C, 143 on
    SIGTERM."""
    from rich.markup import escape

    from edv_ray.commands import command
    from edv_ray.interrupts import stop_on_signals, stopped
    from edv_ray.sweep import run_sweep

    again = command("edv", "sweep", args.sweep, *(["--accept-changed"] if args.accept_changed else []))
    with stop_on_signals():  # SIGTERM (Kubernetes, SLURM) stops it like Ctrl-C
        try:
            outcomes = run_sweep(args.sweep, console=console, show_progress=not args.no_progress,
                                 accept_changed=args.accept_changed)
        except KeyboardInterrupt as stop:
            err.print(f"interrupted: resume with `{escape(again)}`")
            return stopped(stop).exit_code
    bad = {k: o for k, o in outcomes.items() if o["status"] != "complete"}
    for k, o in bad.items():
        detail = f" ({o['detail']})" if o["detail"] else ""
        console.print(f"[yellow]{escape(k)}: {escape(o['status'] + detail)}[/]")
    console.print(f"sweep: {len(outcomes) - len(bad)}/{len(outcomes)} variant(s) complete"
                  + (f" — resume with `{escape(again)}`" if bad else ""))
    return 0 if not bad else 4


def _report(run_dir: Path, console) -> None:
    """The run's tables; a damaged Parquet file is named, not a DuckDB traceback."""
    import duckdb

    from edv_ray.config import ConfigError
    from edv_ray.report.tables import report
    from edv_ray.results.integrity import DamagedTable, damage, damage_message

    try:
        report(run_dir, console=console)
    except (duckdb.Error, DamagedTable) as err:
        bad = damage(run_dir) or getattr(err, "bad", [])  # cut short, or mistyped columns
        if not bad:
            raise
        raise ConfigError(damage_message(run_dir, bad)) from None


def _compare(args, console) -> int:
    import datetime as dt

    from edv_ray.config import ConfigError
    from edv_ray.report.compare import out_folder, write_report
    from edv_ray.report.compare_load import attach, is_run_dir

    if args.boot < 1:
        raise ConfigError(f"--boot {args.boot}: the bootstrap needs at least 1 resample "
                          "(default 10,000)")
    epoch = {"last": "last", "all": None}.get(args.epoch, None)
    if args.epoch not in ("last", "all"):
        try:
            epoch = int(args.epoch)
        except ValueError:
            raise ConfigError(f"--epoch {args.epoch!r}: use last, all or a number") from None
    first = Path(args.paths[0])
    out = Path(args.out) if args.out else (
        first / "compare" if len(args.paths) == 1 and not is_run_dir(first)
        else Path("runs") / f"compare-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if out.exists() and not out.is_dir():
        out_folder(out)  # one clear error before any work
    cmp = attach(args.paths, allow_mixed_tasks=args.allow_mixed_tasks,
                 allow_invalid=args.allow_invalid)
    write_report(cmp.con, out, epoch=epoch, baseline=args.baseline, n_boot=args.boot,
                 pool=args.pool, runs=cmp.runs, notes=cmp.notes)
    console.print((out / "compare.md").read_text(encoding="utf-8"), markup=False,
                  highlight=False)
    console.print(f"comparison folder: {out}", markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
