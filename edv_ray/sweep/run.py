"""Running a sweep: every check before any work, the servers once, variants in threads.

Variants run in ``parallel`` threads of the driver (each fans its episodes out on Ray as
any run does). A variant that fails — any exception — is recorded in ``summary.json``
(its traceback in ``RUN_DIR/error.txt``) and the others go on.

Ctrl-C (SIGINT) reaches the main thread only, which was waiting for the variants: it
stops taking new variants and raises the same interrupt in every variant still running
(``PyThreadState_SetAsyncExc``: delivered at the thread's next Python instruction; the
episode loop waits in slices of at most a second), so each stops as ``edv run`` does on
Ctrl-C — episodes in flight are not recorded and run again on resume, the W&B run is
closed, the run lock released — then the servers stop and the interrupt goes on to the
caller (``edv sweep`` prints the sweep's resume command). A second Ctrl-C while they
stop leaves at once.
"""

from __future__ import annotations

import ctypes
import json
import queue
import threading
import traceback
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape

from edv_ray.config import ConfigError, RunConfig
from edv_ray.sweep import state
from edv_ray.sweep.grid import SweepConfig, Variant, load_sweep
from edv_ray.sweep.servers import plan_servers, union_config, variant_pool


class SweepInterrupted(KeyboardInterrupt):
    """Raised inside a running variant's thread when the sweep is interrupted."""


def _interrupt(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(SweepInterrupted))


def prepare(path: str | Path, accept_changed: bool = False,
            console: Console | None = None) -> tuple[SweepConfig, list[Variant], dict, Path]:
    """Load and check everything (no server, no Ray, nothing written):
    (sweep, variants, run_id → the config it will run with, sweep folder)."""
    from edv_ray import pipeline

    sweep, variants = load_sweep(path)
    folder = Path(sweep.output_dir) / sweep.sweep_id
    pipeline.check_output_dir(folder)
    for note in state.check_unchanged(Path(path), folder, variants, accept_changed):
        (console or Console()).print(f"[yellow]accepted change: {escape(note)}[/]")
    configs: dict[str, RunConfig] = {}
    for v in variants:
        cfg = configs[v.run_id] = state.effective_config(folder, v)
        try:
            pipeline.check_output_dir(state.run_dir(folder, v.run_id))
            pipeline.validate(cfg)  # every variant checked before anything starts
        except ConfigError as err:
            raise ConfigError(f"variant {v.run_id}: {err}") from None
    return sweep, variants, configs, folder


def run_sweep(path: str | Path, console: Console | None = None, show_progress: bool = True,
              accept_changed: bool = False) -> dict[str, dict[str, Any]]:
    """Run (or resume) every variant; returns run_id → {status, detail, axes} (as in
    ``summary.json``). Raises KeyboardInterrupt after stopping on Ctrl-C."""
    from edv_ray.runtime.ray_setup import init_ray
    from edv_ray.runtime.servers import launch_servers

    console = console or Console()
    sweep, variants, configs, folder = prepare(path, accept_changed, console)
    servers, names = plan_servers(configs)
    done = state.completed(folder)
    todo = [v for v in variants if v.run_id not in done]
    needed = {s for v in todo for s in names[v.run_id].values()}  # complete ones need none
    union = union_config({k: mc for k, mc in servers.items() if k in needed},
                         {v.run_id: configs[v.run_id] for v in todo}) if todo else None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "runs").mkdir(exist_ok=True)
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))
    state.record_variants(folder, variants)
    state.write_json(folder / "models.json", {
        server: {"setting": mc.model_dump(mode="json"),
                 "variants": {rid: m for rid, ns in names.items() for m, s in ns.items() if s == server}}
        for server, mc in servers.items()})
    console.print(f"[bold]sweep[/] {escape(sweep.sweep_id)}: {len(todo)} of {len(variants)} "
                  f"variant(s) to run, {len(needed)} model server set(s) → {escape(str(folder))}")
    if union is None:
        return _run_variants(sweep, folder, variants, configs, done, None, names, console, False)
    init_ray(union.runtime)
    pool = launch_servers(union, folder, shared=True)
    try:
        (folder / "servers.json").write_text(json.dumps([i.model_dump() for i in pool.infos], indent=1))
        return _run_variants(sweep, folder, variants, configs, done, pool, names, console,
                             show_progress and sweep.parallel == 1)
    finally:
        pool.stop()


def _run_variants(sweep, folder, variants, configs, done, pool, names, console,
                  show_progress) -> dict[str, dict[str, Any]]:
    from edv_ray import pipeline

    outcomes: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()  # guards outcomes, running and stop
    running: dict[int, str] = {}  # thread id → the variant it runs
    stop = threading.Event()
    todo: queue.Queue = queue.Queue()

    def record(v: Variant, status: str, detail: str = "") -> None:
        with lock:
            outcomes[v.run_id] = {"status": status, "detail": detail, "axes": v.axes}
            state.write_json(folder / state.SUMMARY, outcomes)

    for v in variants:
        if v.run_id in done:
            record(v, "complete", "finished earlier")
        else:
            todo.put(v)

    def one(v: Variant) -> None:
        run_dir = state.run_dir(folder, v.run_id)
        record(v, "running")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "axes.json").write_text(json.dumps({"_sweep_id": sweep.sweep_id, **v.axes},
                                                          default=str))
            result = pipeline.execute(configs[v.run_id], v.run_id, run_dir, console=console,
                                      show_progress=show_progress,
                                      pool=variant_pool(pool, names[v.run_id]))
        except KeyboardInterrupt:  # ours (a library may re-raise it as a plain one)
            record(v, "interrupted")
            raise
        except Exception as err:  # recorded; the other variants go on
            detail = f"{type(err).__name__}: {str(err)[:500]}"
            try:
                (run_dir / "error.txt").write_text(traceback.format_exc())
                detail += f" (traceback: {run_dir / 'error.txt'})"
            except OSError:
                pass
            record(v, "error", detail)
            return
        if result.complete:
            record(v, "complete")
        else:
            record(v, "incomplete", f"{result.errors} episode(s) ended as errors, "
                                    f"{len(result.unfinished)} stage step(s) unfinished")

    def worker(done: threading.Event) -> None:
        me = threading.get_ident()
        try:
            while True:
                try:
                    v = todo.get_nowait()
                except queue.Empty:
                    return
                with lock:
                    if stop.is_set():
                        return
                    running[me] = v.run_id
                try:
                    one(v)
                finally:
                    with lock:
                        running.pop(me, None)
        except KeyboardInterrupt:  # only ever sent by the main thread (see _interrupt)
            pass
        finally:
            done.set()

    finished = [threading.Event() for _ in range(min(sweep.parallel, todo.qsize()))]
    for i, done in enumerate(finished):
        threading.Thread(target=worker, args=(done,), name=f"edv-sweep-{i}", daemon=True).start()
    try:
        _wait(finished)
    except KeyboardInterrupt:
        with lock:
            stop.set()
            for thread_id in running:
                _interrupt(thread_id)
        console.print("[yellow]interrupted: stopping the running variant(s)…[/]")
        _wait(finished)  # a second Ctrl-C leaves at once (the threads are daemons)
        for v in variants:
            status = outcomes.get(v.run_id, {}).get("status")
            if status in (None, "running"):
                record(v, "not started" if status is None else "interrupted")
        raise
    return outcomes


def _wait(finished: list[threading.Event]) -> None:
    """Wait for the variant threads, in slices (Ctrl-C reaches the main thread while it
    waits). Not ``Thread.join``: on Python 3.11 a Ctrl-C inside ``join`` can release the
    joined thread's state lock and mark it stopped while it still runs (seen here: the
    sweep left while a variant was still stopping)."""
    for done in finished:
        while not done.wait(0.2):
            pass
