"""W&B tracking from the driver only (offline by default: files land in the run folder).

A :class:`Tracker` is fed as stages finish (``episodes_done`` after every batch of
episodes, ``stage_done`` after other stages, ``finish`` with the end-of-run tables). It
logs one history step per update, read from the run folder through
:func:`edv_ray.results.views.connect`:

* ``pass@1/<method>`` (its latest epoch so far, all domains and agents) and
  ``pass@1/<method>/<domain>/e<epoch>`` with ``n/…`` and ``errors/…`` beside it;
* ``episodes/<stage>`` (and their success rate) — progress of every stage;
* ``tokens/<stage>/<role>`` (prompt + completion) and ``calls/<stage>/<role>``;
* ``bank/<method>/<bank>`` — items admitted (EDV shared / private, RB items);
* ``verify/<verifier_type>/approve_rate`` and ``…/p_approve_given_failed`` (EDV votes;
  another method with votes under ``verify/<method>/…``,
  poison excluded: the self-confirmation trap as the run goes).

A sweep variant is grouped: ``RUN_DIR/axes.json`` (``{"_sweep_id": ..., axis: value}``)
gives the W&B ``group`` and extra config keys. A resume that accepted changed settings
adds ``settings_number`` and ``settings_changes`` to the config (and the number to the
summary; :mod:`edv_ray.results.settings_history`). At the end the report tables, the report
PNGs (``RUN_DIR/report/*.png``) and a summary are logged, and a finished run's experiences
(provenance, votes) and a seeded sample of its episodes as W&B Tables
(:mod:`.wandb_tables`). W&B ids, steps across resumes and many runs in one process (a
sweep's parallel variants): :mod:`.wandb_session`.

Never fails or slows a run: every W&B call runs on one background thread of the driver
(``wandb.init`` included), updates queued while it is busy collapse into one, and the
first W&B error switches tracking off and is reported once on the console. The driver
only enqueues (measured: microseconds per call; ``tracking/*`` in the summary). Mode:
``cfg.wandb.mode``, overridden by the ``WANDB_MODE`` environment variable.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from edv_ray.config import RunConfig
from edv_ray.report import wandb_session, wandb_tables

FINISH_WAIT_S = 120.0  # the most the driver waits at the end for W&B to write its files


def wandb_mode(cfg: RunConfig) -> str:
    return os.environ.get("WANDB_MODE") or cfg.wandb.mode


def read_axes(run_dir: str | Path) -> tuple[str | None, dict[str, Any]]:
    """(sweep id, axes) from ``RUN_DIR/axes.json``; (None, {}) when there is none."""
    path = Path(run_dir) / "axes.json"
    if not path.is_file():
        return None, {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    sweep = data.pop("_sweep_id", None)
    return (None if sweep is None else str(sweep)), data


def _rows(con, sql: str) -> list[tuple]:
    import duckdb

    try:
        return con.execute(sql).fetchall()
    except duckdb.CatalogException:  # a view of a method that is not registered
        return []


def live_metrics(run_dir: str | Path) -> dict[str, float]:
    """The numbers one history step holds, read from the run folder as it is now (not while
    a compaction swaps files for their segment: no row is counted twice or lost)."""
    from edv_ray.results.store import COMPACTION_LOCK

    with COMPACTION_LOCK:
        return _live_metrics(run_dir)


def _live_metrics(run_dir: str | Path) -> dict[str, float]:
    from edv_ray.results.views import connect

    con = connect(run_dir)
    out: dict[str, float] = {}
    try:
        for m, d, e, n, s, err in _rows(con, """
                SELECT method, domain, epoch, sum(n), sum(successes), sum(errors)
                FROM method_pass_at_1 GROUP BY ALL"""):
            out[f"pass@1/{m}/{d}/e{e}"] = s / n
            out[f"n/{m}/{d}/e{e}"], out[f"errors/{m}/{d}/e{e}"] = n, err
        for m, e, n, s in _rows(con, """
                SELECT method, epoch, count(*), count(*) FILTER (WHERE success) FROM (
                    SELECT *, max(epoch) OVER (PARTITION BY method) AS last_epoch
                    FROM method_results) WHERE epoch = last_epoch GROUP BY ALL"""):
            out[f"pass@1/{m}"], out[f"n/{m}"], out[f"epoch/{m}"] = s / n, n, e
        for st, n, s, err in _rows(con, """
                SELECT stage, count(*), count(*) FILTER (WHERE success),
                       count(*) FILTER (WHERE status = 'error') FROM episodes GROUP BY ALL"""):
            out[f"episodes/{st}"], out[f"episodes_errors/{st}"] = n, err
            out[f"episodes_success/{st}"] = s / n
        for st, role, calls, pt, ct in _rows(con, """
                SELECT stage, role, sum(calls), sum(prompt_tokens), sum(completion_tokens)
                FROM tokens_by_stage GROUP BY ALL"""):
            out[f"tokens/{st}/{role}"] = int(pt or 0) + int(ct or 0)
            out[f"calls/{st}/{role}"] = calls
        for m, bank, items in _rows(con, "SELECT method, bank, sum(items) FROM admitted GROUP BY ALL"):
            out[f"bank/{m}/{bank}"] = int(items or 0)
        out.update(_vote_metrics(con))
    finally:
        con.close()
    return out


def _vote_metrics(con) -> dict:
    """``verify/<verifier_type>/…`` of each method with votes (``Method.votes_view``): the
    last in report order (the paper's EDV) under bare keys, any other under
    ``verify/<method>/<verifier_type>/…``."""
    from edv_ray.report.method_facts import method_order, methods

    voting = [n for n in reversed(method_order()) if methods()[n].votes_view]
    out = {}
    for i, name in enumerate(voting):
        pre = "verify" if i == 0 else f"verify/{name}"
        for vt, votes, rate, n_failed, p_failed in _rows(con, f"""
                SELECT verifier_type, count(*), avg(CAST(approve AS DOUBLE)),
                       count(*) FILTER (WHERE supporting_all_failed),
                       avg(CAST(approve AS DOUBLE)) FILTER (WHERE supporting_all_failed)
                FROM {methods()[name].votes_view} WHERE NOT is_poison GROUP BY ALL"""):
            out[f"{pre}/{vt}/votes"], out[f"{pre}/{vt}/votes_all_failed"] = votes, n_failed
            if rate is not None:
                out[f"{pre}/{vt}/approve_rate"] = rate
            if p_failed is not None:
                out[f"{pre}/{vt}/p_approve_given_failed"] = p_failed
    return out


def _table(rows: list[dict]):
    import wandb

    cols = list(rows[0])
    return wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows])


def end_payload(tables: dict) -> tuple[dict, dict]:
    """(what to log once at the end: tables, summary) — the end-of-run record."""
    logged = {name: _table(rows) for name, rows in tables.items() if rows}
    summary: dict[str, Any] = {}
    for r in tables.get("method_pass_at_1", []):
        summary[f"pass@1/{r['method']}/e{r['epoch']}/{r['agent']}/{r['domain']}"] = r["pass_at_1"]
    for r in tables.get("tokens_by_stage", []):
        key = f"tokens/{r['stage']}/{r['role']}"
        summary[key] = summary.get(key, 0) + int(r["prompt_tokens"] or 0) + int(r["completion_tokens"] or 0)
    return logged, summary


def report_images(run_dir: Path) -> dict:
    import wandb

    return {f"plots/{p.stem}": wandb.Image(str(p))
            for p in sorted((Path(run_dir) / "report").glob("*.png"))}


class Tracker:
    """Live W&B logging of one run (see the module docstring)."""

    def __init__(self, cfg: RunConfig, run_id: str, run_dir: Path, console=None) -> None:
        self.cfg, self.run_id, self.run_dir = cfg, run_id, Path(run_dir)
        self.mode = wandb_mode(cfg)
        self.console = console
        self.enabled = self.mode != "disabled"
        self.failure: str | None = None  # the error that switched tracking off
        self._reported: set[str] = set()
        self._session: wandb_session.Session | None = None
        self._q: queue.Queue = queue.Queue()
        self._batches = self._stages = 0
        self._last_stage = ""
        self._settings: dict[str, Any] = {}  # settings changes a resume accepted (W&B config)
        self._t0 = time.monotonic()
        self.stats = {"driver_calls": 0, "driver_s_max": 0.0, "snapshots": 0,
                      "snapshot_s_max": 0.0, "log_s_max": 0.0, "init_s": None}
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="edv-wandb", daemon=True)
            self._thread.start()
            self._q.put(("init", None))

    # ---- driver side: enqueue only ----------------------------------------------------
    def episodes_done(self, ctx) -> None:
        """Called after every batch of episodes."""
        self._driver_call(ctx, None)

    def stage_done(self, ctx, name: str) -> None:
        """Called after a stage that is not a batch of episodes (distill, verify, ...)."""
        self._driver_call(ctx, name)

    def _driver_call(self, ctx, stage: str | None) -> None:
        t0 = time.perf_counter()
        if ctx is not None and getattr(ctx, "console", None) is not None:
            self.console = ctx.console
        self._report_failure()
        if not self.enabled:
            return
        if stage is None:
            self._batches += 1
        else:
            self._stages += 1
            self._last_stage = stage
        self._q.put(("snap", {"progress/batches": self._batches,
                              "progress/stages_done": self._stages}))
        dt = time.perf_counter() - t0
        self.stats["driver_calls"] += 1
        self.stats["driver_s_max"] = max(self.stats["driver_s_max"], dt)

    def finish(self, tables: dict | None) -> None:
        """End-of-run tables, plots and summary; then close the W&B run (bounded wait).
        ``None``: the run failed — the last numbers are logged and the run closed as failed."""
        if self._thread is not None:
            self._q.put(("finish", tables))
            self._thread.join(FINISH_WAIT_S)
            if self._thread.is_alive():
                self._fail(TimeoutError(f"W&B did not finish within {FINISH_WAIT_S:g}s; "
                                        "its files may be incomplete"))
        self._report_failure()

    def abort(self) -> None:
        """The run stopped on an error: close the W&B run (exit code 1) with what it has."""
        self.finish(None)

    # ---- failures ----------------------------------------------------------------------
    def _fail(self, err: BaseException) -> None:
        """Switch tracking off (first error wins) and leave a message for the console."""
        if self.failure is None:
            self.failure = f"{type(err).__name__}: {str(err)[:300]}"
        self.enabled = False
        session, self._session = self._session, None
        if session is not None and threading.current_thread() is self._thread:
            try:
                wandb_session.close(session, exit_code=1)
            except Exception:  # already switched off: nothing more to do
                pass

    def _warn_once(self, key: str, msg: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        try:
            from rich.console import Console
            from rich.markup import escape

            (self.console or Console(stderr=True)).print(f"[yellow]{escape(msg)}[/]")
        except Exception:  # a console problem must not fail the run
            pass

    def _report_failure(self) -> None:
        if self.failure is not None:
            self._warn_once("failure", f"W&B tracking switched off: {self.failure}")

    # ---- the W&B thread ----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            items = [self._q.get()]
            while True:  # collapse what queued up while W&B was busy
                try:
                    items.append(self._q.get_nowait())
                except queue.Empty:
                    break
            snap: dict | None = None
            for kind, arg in items:
                if kind == "snap":
                    snap = {**(snap or {}), **arg}
                    continue
                if snap is not None:
                    self._guard(self._snapshot, snap)
                    snap = None
                if kind == "init":
                    self._guard(self._init)
                elif kind == "finish":
                    self._guard(self._finish, arg)
                    return
            if snap is not None:
                self._guard(self._snapshot, snap)

    def _guard(self, fn, *args) -> None:
        if not self.enabled:
            return
        try:
            fn(*args)
        except Exception as err:  # W&B must never fail the run
            self._fail(err)

    def _init(self) -> None:
        t0 = time.monotonic()
        from edv_ray.results.settings_history import wandb_config

        sweep, axes = read_axes(self.run_dir)
        # a resume that accepted changed settings says so (settings_number, settings_changes)
        self._settings = wandb_config(self.run_dir)
        config = {**self.cfg.model_dump(mode="json"), **axes, **self._settings}
        if sweep is not None:
            config["sweep_id"] = sweep
        self._session = wandb_session.start(self.cfg.wandb.project, self.run_id, self.run_dir,
                                            self.mode, config, group=sweep)
        self.stats["init_s"] = time.monotonic() - t0

    def _metrics(self) -> dict:
        try:
            return live_metrics(self.run_dir)
        except Exception as err:  # a snapshot is skipped, the run goes on
            self._warn_once("metrics", f"W&B: live metrics unavailable ({type(err).__name__}: "
                                       f"{str(err)[:200]})")
            return {}

    def _snapshot(self, progress: dict) -> None:
        t0 = time.monotonic()
        metrics = self._metrics()
        metrics.update(progress)
        metrics["progress/elapsed_s"] = time.monotonic() - self._t0
        t1 = time.monotonic()
        self._session.log(metrics)
        t2 = time.monotonic()
        self.stats["snapshots"] += 1
        self.stats["snapshot_s_max"] = max(self.stats["snapshot_s_max"], t2 - t0)
        self.stats["log_s_max"] = max(self.stats["log_s_max"], t2 - t1)

    def _finish(self, tables: dict | None) -> None:
        self._snapshot({"progress/batches": self._batches, "progress/stages_done": self._stages})
        logged, summary = end_payload(tables or {})
        logged.update(report_images(self.run_dir))
        if tables is not None:  # a finished run: its experiences and sampled episodes
            try:
                data, counts = wandb_tables.run_tables(self.run_dir, seed=self.cfg.seed)
                logged.update(data)
                summary.update(counts)
            except Exception as err:  # the tables are skipped, the rest is still logged
                self._warn_once("tables", f"W&B: experience / episode tables skipped "
                                          f"({type(err).__name__}: {str(err)[:200]})")
        if logged:
            self._session.log(logged)
        summary["last_stage"] = self._last_stage
        if self._settings:
            summary["settings_number"] = self._settings["settings_number"]
        summary.update({f"tracking/{k}": v for k, v in self.stats.items() if v is not None})
        self._session.run.summary.update(summary)
        session, self._session = self._session, None
        wandb_session.close(session, exit_code=0 if tables is not None else 1)


def log_run(cfg: RunConfig, run_id: str, run_dir: Path, tables: dict) -> None:
    """Log a finished run's end-of-run tables, plots and summary in one go (no live steps).
    Unlike :class:`Tracker`, errors propagate (for scripts that re-log a run folder)."""
    mode = wandb_mode(cfg)
    if mode == "disabled":
        return
    from edv_ray.results.settings_history import wandb_config

    sweep, axes = read_axes(run_dir)
    session = wandb_session.start(cfg.wandb.project, run_id, run_dir, mode,
                                  {**cfg.model_dump(mode="json"), **axes,
                                   **wandb_config(run_dir)}, group=sweep)
    exit_code = 1
    try:
        logged, summary = end_payload(tables)
        logged.update(report_images(run_dir))
        data, counts = wandb_tables.run_tables(run_dir, seed=cfg.seed)
        logged.update(data)
        summary.update(counts)
        if logged:
            session.log(logged)
        session.run.summary.update(summary)
        exit_code = 0
    finally:
        wandb_session.close(session, exit_code)
