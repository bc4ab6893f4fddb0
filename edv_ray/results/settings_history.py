"""Which settings a run's episodes ran under: ``RUN_DIR/settings_history.json``.

A run records its settings (the resolved config) when it first starts: settings 0. A
resume compares the config it is given (``config.yaml``, which anyone can edit) with the
latest recorded settings. A field that changes what an episode does — models, agents and
their sampling or prompting, the benchmark and its task selection, trials, seeds, the
method sections, memory settings, the run id — is refused (:func:`check_resume`), naming
the field(s), before anything is written. With ``--accept-changed`` the run goes on: the
change becomes the next settings number (which fields, old → new, when, and how many
episodes were finished before it), W&B gets it in its config, and ``edv report`` prints
which episodes ran under which settings (:func:`episodes_by_settings`).

Fields that only say where or how fast a run goes may change freely (:data:`FREE`):
output paths, W&B, concurrency, workers, timeouts and retries, the Ray address, and how
many threads, replicas or GPUs serve a model.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from edv_ray.config import ConfigError, RunConfig
from edv_ray.results.parquet_io import write_text_atomic

HISTORY = "settings_history.json"

# dotted field patterns whose change does not change what an episode does
FREE = ("output_dir", "wandb.*", "llm.*",
        "runtime.concurrency", "runtime.workers", "runtime.episode_timeout_s",
        "runtime.ray_address", "runtime.num_cpus", "runtime.start_interval_s",
        "models.*.n_threads", "models.*.replicas", "models.*.server_per",
        "models.*.num_gpus", "models.*.api_key_env", "models.*.python")


def settings_of(cfg: RunConfig) -> dict[str, Any]:
    """The config as JSON, agents keyed by name (so a field is named ``agents.NAME.…``)."""
    data = cfg.model_dump(mode="json")
    data["agents"] = {a["name"]: a for a in data.get("agents", [])}
    return data


def flat_fields(d: dict, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{dotted.field: value}`` (empty mappings kept as values)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat_fields(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def is_free(field: str) -> bool:
    return any(fnmatchcase(field, p) for p in FREE)


def episode_changes(old: dict, new: dict) -> list[dict]:
    """[{field, old, new}] for every field that differs and changes episodes (a field
    missing on one side is ``None`` there)."""
    a, b = flat_fields(old), flat_fields(new)
    return [{"field": k, "old": a.get(k), "new": b.get(k)} for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k) and not is_free(k)]


def _short(v: Any, limit: int = 60) -> str:
    s = json.dumps(v, default=str, ensure_ascii=False)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def describe(changes: list[dict], most: int = 6) -> str:
    """``runtime.trials (1 → 2), …`` — one line."""
    parts = [f"{c['field']} ({_short(c['old'])} → {_short(c['new'])})" for c in changes[:most]]
    more = f" and {len(changes) - most} more" if len(changes) > most else ""
    return ", ".join(parts) + more


def read_history(run_dir: str | Path) -> list[dict]:
    """The recorded settings, oldest first ([] when the run has none yet)."""
    path = Path(run_dir) / HISTORY
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["settings"]
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and isinstance(e.get("config"), dict) for e in entries):
            raise ValueError("no list of settings")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{path} is damaged ({type(err).__name__}); the settings the run's "
                          "episodes ran under are unknown — restore the file") from None
    return entries


def check_resume(cfg: RunConfig, run_dir: str | Path, accept_changed: bool,
                 tasks: dict[str, list[str]] | None = None) -> list[dict]:
    """The episode-changing fields ``cfg`` changes against the latest recorded settings
    (``[]``: none, or nothing recorded yet). Raises ConfigError unless ``accept_changed``;
    also when the change selects a task the run never typed (``tasks``: domain → ids
    selected now; task types are fixed at a run's start)."""
    history = read_history(run_dir)
    if not history:
        return []
    changes = episode_changes(history[-1]["config"], settings_of(cfg))
    if changes and not accept_changed:
        raise ConfigError(
            f"{run_dir}: settings that change episodes differ from the ones its finished "
            f"episodes ran under: {describe(changes)} — restore them in config.yaml, or "
            "resume with --accept-changed (the change is recorded and reported)")
    if changes and tasks:
        _check_typed(run_dir, tasks, changes)
    return changes


def _check_typed(run_dir: str | Path, tasks: dict[str, list[str]], changes: list[dict]) -> None:
    from edv_ray.results.parquet_io import read_rows

    typed = {(r["domain"], r["task_id"])
             for r in read_rows(Path(run_dir) / "task_types" / "part.parquet")}
    new = [f"{d}/{t}" for d, ids in tasks.items() for t in ids if (d, t) not in typed]
    if typed and new:
        fields = [c["field"] for c in changes if c["field"].startswith("benchmark.")]
        raise ConfigError(
            f"{run_dir}: {', '.join(fields) or 'the task selection'} now selects "
            f"{len(new)} task(s) the run did not start with (e.g. {new[0]!r}); a run's tasks "
            "are fixed at its start — start a new run for them")


def finished_episodes(run_dir: str | Path) -> int:
    """Episodes with a finished (``ok``) latest attempt."""
    if not any((Path(run_dir) / "episodes").glob("stage=*")):
        return 0
    from edv_ray.results.views import connect

    con = connect(run_dir)
    try:
        return con.execute("SELECT count(*) FROM episodes WHERE status = 'ok'").fetchone()[0]
    finally:
        con.close()


def record(cfg: RunConfig, run_dir: str | Path, changes: list[dict]) -> dict | None:
    """Record the settings the next episodes run under: settings 0 at a run's first start
    (or the first resume of a run from before this record), then one entry per accepted
    change. Returns the new entry (``None``: nothing changed)."""
    history = read_history(run_dir)
    if history and not changes:
        return None
    now = time.time()
    entry = {"number": len(history), "at": now,
             "at_utc": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="seconds"),
             "episodes_before": finished_episodes(run_dir), "changed": changes,
             "config": settings_of(cfg)}
    if not history and entry["episodes_before"]:
        entry["note"] = "recorded at a resume: earlier episodes' settings were not recorded"
    _write(Path(run_dir) / HISTORY, {"settings": [*history, entry]})
    return entry


def _write(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def wandb_config(run_dir: str | Path) -> dict[str, Any]:
    """What W&B's run config says about settings changes (empty when there were none)."""
    history = read_history(run_dir)
    if len(history) < 2:
        return {}
    return {"settings_number": history[-1]["number"],
            "settings_changes": [f"settings {e['number']} from episode {e['episodes_before']} "
                                 f"({e['at_utc']}): {describe(e['changed'], most=20)}"
                                 for e in history[1:]]}


def episodes_by_settings(run_dir: str | Path, con) -> list[dict]:
    """One row per accepted change: its number, when, the fields (old → new), episodes
    finished before it, and episodes (latest attempts) started under it. ``[]`` when the
    run's settings never changed."""
    history = read_history(run_dir)
    if len(history) < 2:
        return []
    starts = [float(e["at"]) for e in history]
    rows = con.execute("SELECT started_at FROM episodes WHERE started_at IS NOT NULL").fetchall()
    counts = [0] * len(history)
    for (t,) in rows:
        counts[max([i for i, s in enumerate(starts) if t >= s] or [0])] += 1
    return [{"settings": e["number"], "from_utc": e["at_utc"],
             "episodes_before": e["episodes_before"], "episodes_under": counts[i],
             "changed": describe(e["changed"], most=20) if e["changed"] else "(as started)"}
            for i, e in enumerate(history)]
