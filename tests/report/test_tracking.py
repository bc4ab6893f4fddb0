"""Live W&B tracking on a real scripted-server run: history steps are written while the
run goes (read back from W&B's offline transaction log), sweep axes group the run, and a
W&B failure never fails the run."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.testing import wandb_log
from edv_ray.testing.helpers import scripted_config
from tests.methods import scripts

TRAIN = ["create_task_1", "update_task_1"]
TEST = ["create_task_1_with_env_assertions"]


def config(server, tmp_path, methods) -> dict:
    agents = [{"name": n, "model": "scripted", "prompt_strategy": "native_tools"}
              for n in ("bad", "good", "judge")]
    cfg = scripted_config(
        server.base_url, tmp_path, method=methods, agents=agents,
        roles={"executors": ["bad", "good"]},
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": None, "solo": "always",
                   "task_ids": TEST, "train_split": "all", "train_task_ids": TRAIN})
    cfg["wandb"] = {"mode": "offline"}
    # distil even without a success/failure contrast: votes and a bank whatever the runs did
    cfg["edv"] = {"n_executors": 2, "retrieval_tau": -1.0, "require_contrast": False}
    return cfg


def run(cfg_dict, console=None, before=None):
    """(run folder, RunResult) of a new run of ``cfg_dict``."""
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg_dict))
    if before is not None:
        before(run_dir)
    result = pipeline.execute(cfg, run_id, run_dir, console=console or Console(quiet=True),
                              show_progress=False)
    return run_dir, result


def offline_log(run_dir: Path) -> Path:
    files = wandb_log.offline_logs(run_dir)
    assert len(files) == 1, files
    return files[0]


@pytest.mark.slow
def test_history_is_written_while_the_run_goes(server, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    server.agent_modes["bad"] = "nothing"
    server.add_script("distiller", scripts.distiller)
    server.add_script("verifier", scripts.verifier_all_approve)
    axes = {"_sweep_id": "sweep-42", "edv.epochs": 1, "pool": "bad+good"}

    def write_axes(run_dir):
        run_dir.mkdir(parents=True)
        (run_dir / "axes.json").write_text(json.dumps(axes))

    run_dir, result = run(config(server, tmp_path, ["no_memory", "edv"]), before=write_axes)
    tables = result.tables
    assert tables["method_pass_at_1"]
    records = list(wandb_log.records(offline_log(run_dir)))
    kinds = [r.WhichOneof("record_type") for r in records]
    # grouped by the sweep, axes as config keys
    meta = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert meta.run_group == "sweep-42"
    config_keys = {i.key: json.loads(i.value_json) for i in meta.config.update}
    assert config_keys["pool"] == "bad+good" and config_keys["edv.epochs"] == 1
    assert "seed" in config_keys and "edv" in config_keys  # the run config is there too

    hist = wandb_log.history(records)
    steps = [h["_step"] for h in hist]
    assert steps == sorted(steps) and len(set(steps)) == len(steps) and len(hist) >= 3
    # the report CSVs are written after every method finished, before Tracker.finish:
    # steps stamped before them were logged while the run was going
    report_done = min(p.stat().st_mtime for p in (run_dir / "report").glob("*.csv"))
    live = [h for h in hist if h["_timestamp"] < report_done]
    assert len(live) >= 2, [(h["_step"], h["_timestamp"], report_done) for h in hist]
    assert any("pass@1/no_memory" in h for h in live)
    # no_memory had finished (its one batch) when that step was taken: its live Pass@1
    # is the end-of-run value, pooled over both executors on the one test task
    rows = [r for r in tables["method_pass_at_1"] if r["method"] == "no_memory"]
    expect = sum(r["successes"] for r in rows) / sum(r["n"] for r in rows)
    nm = next(h for h in live if "pass@1/no_memory" in h)
    assert nm["pass@1/no_memory"] == pytest.approx(expect) and nm["n/no_memory"] == 2
    assert nm["pass@1/no_memory/mock/e0"] == pytest.approx(expect)
    assert nm["n/no_memory/mock/e0"] == 2 and nm["episodes/eval"] == 2
    assert nm["tokens/eval/agent"] > 0 and "pass@1/edv" not in hist[0]
    # the last step has EDV's construction, banks and votes (as the report tables say)
    last = [h for h in hist if "pass@1/edv" in h][-1]
    assert last["bank/edv/shared"] >= 1 and last["episodes/execute"] == 4
    audit = {r["verifier_type"]: r for r in tables["verification_audit"]}["executor"]
    assert last["verify/executor/approve_rate"] == audit["approve_rate"] == 1.0
    assert last["verify/executor/votes"] == audit["votes"] >= 2
    assert last["verify/executor/votes_all_failed"] == audit["votes_all_failed"]
    assert last["calls/distill/distiller"] >= 1 and last["tokens/verify/verifier"] > 0
    # live steps come before the end-of-run summary (which carries the report's keys)
    end = max(i for i, r in enumerate(records) if r.WhichOneof("record_type") == "summary"
              and any(u.key.startswith("pass@1/no_memory/e0/") for u in r.summary.update))
    first_live = kinds.index("history")
    assert first_live < end and kinds[-1] == "exit"
    summary = {u.key: json.loads(u.value_json) for r in records
               if r.WhichOneof("record_type") == "summary" for u in r.summary.update if u.key}
    # the driver only enqueues: each call costs well under a millisecond-scale budget
    assert summary["tracking/driver_calls"] >= 3 and summary["tracking/driver_s_max"] < 0.05
    # the report plot was logged as an image (at the end), its file in the run's folder
    assert hist[-1]["plots/ability_matrix/_type"] == "image-file"
    image = offline_log(run_dir).parent / "files" / hist[-1]["plots/ability_matrix/path"]
    assert image.is_file() and image.suffix == ".png"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["init_raises", "bad_mode"])
def test_wandb_failure_never_fails_the_run(server, tmp_path, monkeypatch, how):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    calls = []
    if how == "init_raises":
        def broken_init(*a, **k):
            calls.append(1)
            raise RuntimeError("wandb service unreachable")
        monkeypatch.setattr(wandb, "init", broken_init)
    else:
        monkeypatch.setenv("WANDB_MODE", "no-such-mode")
    out = io.StringIO()
    run_dir, result = run(config(server, tmp_path, "no_memory"),
                          console=Console(file=out, width=200))
    # the run completed as normal (exit 0 from the CLI): results and report are there
    assert result.complete
    tables = result.tables
    assert sorted((r["agent"], r["n"]) for r in tables["method_pass_at_1"]) == [("bad", 1), ("good", 1)]
    assert (run_dir / "report" / "method_pass_at_1.csv").is_file()
    text = out.getvalue()
    assert text.count("W&B tracking switched off") == 1
    if how == "init_raises":
        assert calls == [1] and "wandb service unreachable" in text
    assert wandb.run is None


def test_log_failure_mid_run_switches_tracking_off(tmp_path, monkeypatch):
    """A W&B error after init: reported once, no further W&B calls, finish returns."""
    import wandb

    from edv_ray.report import tracking

    class FlakyRun:
        def __init__(self):
            self.logged, self.finished = 0, []
            self.summary = {}

        step = 0

        def log(self, data, step=None):
            self.logged += 1
            raise OSError("disk full")

        def finish(self, exit_code=None):
            self.finished.append(exit_code)

    fake = FlakyRun()
    monkeypatch.setattr(wandb, "init", lambda *a, **k: fake)
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = load_config_dict(scripted_config("http://127.0.0.1:9/v1", tmp_path))
    out = io.StringIO()

    class Ctx:
        console = Console(file=out, width=200)

    t = tracking.Tracker(cfg, "t", tmp_path)
    for _ in range(5):
        t.episodes_done(Ctx())
    t.finish({})
    t.stage_done(Ctx(), "verify")
    assert fake.logged == 1 and fake.finished == [1] and not t.enabled
    assert out.getvalue().count("W&B tracking switched off: OSError: disk full") == 1


def test_disabled_tracker_starts_nothing(tmp_path, monkeypatch):
    from edv_ray.report import tracking

    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = load_config_dict(scripted_config("http://127.0.0.1:9/v1", tmp_path))
    t = tracking.Tracker(cfg, "t", tmp_path)
    t.episodes_done(None)
    t.finish({})
    assert t._thread is None and not (tmp_path / "wandb").exists()


def test_abort_closes_the_run_as_failed(tmp_path, monkeypatch):
    """A run that stops on an error: the last numbers are logged, the W&B run exits 1."""
    import wandb

    from edv_ray.report import tracking

    class Run:
        def __init__(self):
            self.logged, self.finished, self.summary = [], [], {}

        step = 0

        def log(self, data, step=None):
            self.logged.append(data)

        def finish(self, exit_code=None):
            self.finished.append(exit_code)

    fake = Run()
    monkeypatch.setattr(wandb, "init", lambda *a, **k: fake)
    monkeypatch.setattr(tracking.wandb_session, "flush_files", lambda: None)
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = load_config_dict(scripted_config("http://127.0.0.1:9/v1", tmp_path))
    t = tracking.Tracker(cfg, "t", tmp_path)
    t.stage_done(None, "distill")
    t.abort()
    assert fake.finished == [1] and fake.logged and fake.logged[-1]["progress/stages_done"] == 1
    assert fake.summary["last_stage"] == "distill" and t.failure is None


# ---- many runs in one process, resumes and re-runs (real W&B, offline files read back)
def tracker(tmp_path, folder: str, run_id: str):
    """A Tracker of an empty run folder (its live metrics are empty: progress keys only)."""
    from edv_ray.report import tracking

    cfg = load_config_dict(scripted_config("http://127.0.0.1:9/v1", tmp_path))
    run_dir = tmp_path / folder
    run_dir.mkdir(exist_ok=True)
    return tracking.Tracker(cfg, run_id, run_dir, console=Console(quiet=True))


def wait_for(cond, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def progress(recs) -> list[int]:
    return [h["progress/batches"] for h in wandb_log.history(recs) if "progress/batches" in h]


def test_parallel_runs_keep_their_history_when_one_finishes_first(tmp_path, monkeypatch):
    """A sweep's parallel variants share W&B's service: the first to finish must not end
    the others' runs (it used to call wandb.teardown(), which finishes every open run)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    ts = [tracker(tmp_path, f"v{i}", f"v{i}") for i in range(3)]
    for t in ts:
        t.episodes_done(None)
    wait_for(lambda: all(t.stats["snapshots"] >= 1 for t in ts))
    ts[0].finish({})  # the first variant ends while the others still log
    for t in ts[1:]:
        t.episodes_done(None)
    wait_for(lambda: all(t.stats["snapshots"] >= 2 or not t.enabled for t in ts[1:]))
    threads = [threading.Thread(target=t.finish, args=({},)) for t in ts[1:]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i, t in enumerate(ts):
        assert t.failure is None, t.failure
        recs = list(wandb_log.records(offline_log(tmp_path / f"v{i}")))
        assert progress(recs)[-1] == (1 if i == 0 else 2)
        assert wandb_log.exit_code(recs) == 0
        assert wandb_log.summary(recs)["tracking/driver_calls"] == (1 if i == 0 else 2)


def test_resume_continues_the_run_and_a_rerun_starts_a_new_one(tmp_path, monkeypatch):
    """Resuming a folder resumes its W&B run with steps going on (offline W&B restarted
    `_step` at 0); a new run with the same run_id gets its own W&B run (a fixed run_id
    used to append every re-run to one W&B run)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    first = tracker(tmp_path, "a", "same")
    first.episodes_done(None)
    wait_for(lambda: first.stats["snapshots"] >= 1)
    first.episodes_done(None)
    first.finish({})
    again = tracker(tmp_path, "a", "same")  # `edv run --resume a`
    again.episodes_done(None)
    again.finish({})
    other = tracker(tmp_path, "b", "same")  # the same config run again elsewhere
    other.finish({})
    sessions = [list(wandb_log.records(p)) for p in wandb_log.offline_logs(tmp_path / "a")]
    assert len(sessions) == 2
    ids = [wandb_log.run_record(r).run_id for r in sessions]
    rerun_id = wandb_log.run_record(list(wandb_log.records(offline_log(tmp_path / "b")))).run_id
    assert ids[0] == ids[1] and ids[0].startswith("same-") and rerun_id.startswith("same-")
    assert rerun_id != ids[0]
    steps = [[h["_step"] for h in wandb_log.history(r)] for r in sessions]
    assert steps[0] and steps[1] and max(steps[0]) < min(steps[1])
    assert steps[1] == sorted(steps[1])
