"""`edv sweep`: the grid expands into unique run folders with their axes, every variant is
served by the servers of its own model settings, variants run in parallel with their own
W&B runs, one variant's failure is recorded while the others finish, re-running resumes
(a changed sweep file is refused), Ctrl-C stops the sweep promptly, and `edv compare`
reads the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from edv_ray.cli import main
from edv_ray.methods.registry import Method, register
from edv_ray.results.run_lock import RunLock
from edv_ray.results.views import connect
from edv_ray.runtime.servers import role_groups
from edv_ray.sweep import SweepConfig, expand, load_sweep, prepare
from edv_ray.sweep.servers import plan_servers, union_config
from edv_ray.testing import wandb_log
from edv_ray.testing.helpers import scripted_config, tau2_tasks

ROOT = Path(__file__).parents[2]


class _Boom(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _boom(ctx, section) -> None:
    raise RuntimeError("boom: a bug in this variant's method")


# a method plug-in that fails (any bug in any method): its variant fails, the rest go on
register(Method(name="boom_test", config_cls=_Boom, run=_boom, uses_train=False,
                results_sql="SELECT * FROM episodes WHERE false"))


def write_sweep(tmp_path, base: dict, axes: dict, parallel: int = 2) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"sweep_id": "sw", "output_dir": str(tmp_path / "out"),
                                    "base": base, "parallel": parallel, "axes": axes},
                                   sort_keys=False))
    return str(path)


def small_base(url: str, tmp_path, **over) -> dict:
    """One agent, one mock task, one worker: the cheapest real run."""
    return scripted_config(
        url, tmp_path, agents=[{"name": "good", "model": "scripted", "prompt_strategy": "native_tools"}],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": 1, "solo": "always"},
        runtime={"concurrency": 2, "workers": 1, "episode_timeout_s": 120}, **over)


def test_colliding_labels_fail_before_any_work(server, tmp_path, capsys):
    """0.25 and "0.25" name the same folder: the second variant used to re-run the first's
    folder silently ("1/1 variant(s) complete" for a 2-point grid)."""
    path = write_sweep(tmp_path, small_base(server.base_url, tmp_path), {"contamination": [0.25, "0.25"],
                                                                           "method": ["edv"]})
    assert main(["sweep", "--no-progress", path]) == 2
    err = capsys.readouterr().err
    assert "would share the folder sw-0.25-edv" in err and "0.25" in err and "'0.25'" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not server.requests


def test_paths_get_readable_unique_folders():
    """Values cut to the same 24 characters used to share a folder."""
    sweep = SweepConfig(sweep_id="mf", base={}, axes={
        "memory_from": ["/data/runs/sweeps/source/pool-A", "/data/runs/sweeps/source/pool-B"],
        "edv.retrieval_k": [1, 3]})
    ids = [rid for rid, _cfg, _axes in expand(sweep, {})]
    assert len(set(ids)) == 4
    assert all(len(i) <= 64 for i in ids)
    assert sum("pool-A" in i for i in ids) == 2 and sum("pool-B" in i for i in ids) == 2
    assert ids[0].endswith("-1") and ids[1].endswith("-3")


def test_a_model_setting_that_differs_between_variants_is_another_server(tmp_path):
    """The last variant's model settings used to win for every variant (union_config)."""
    base = {"models": {"qwen": {"engine": "llama_cpp", "weights": "qwen2.5-coder-0.5b-instruct",
                                "n_ctx": 2048}},
            "agents": [{"name": "a", "model": "qwen"}], "benchmark": {"domains": ["mock"]}}
    path = write_sweep(tmp_path, base, {"models.qwen.n_ctx": [2048, 4096], "seed": [0, 1]})
    _sweep, variants = load_sweep(path)
    configs = {v.run_id: v.config for v in variants}
    servers, names = plan_servers(configs)
    assert {k: v.n_ctx for k, v in servers.items()} == {"qwen": 2048, "qwen-2": 4096}
    assert {rid: n["qwen"] for rid, n in names.items()} == {
        "sw-2048-0": "qwen", "sw-2048-1": "qwen", "sw-4096-0": "qwen-2", "sw-4096-1": "qwen-2"}
    union = union_config(servers, configs)
    assert sorted(role_groups(union)) == ["qwen", "qwen-2"]  # launch_servers starts both
    assert union.models["qwen-2"].n_ctx == 4096 and union.models["qwen"].n_ctx == 2048


@pytest.mark.parametrize("name", ["heterogeneity_paper", "heterogeneity_embedded"])
def test_heterogeneity_sweeps_vary_the_pool_size(name):
    """They said "pool size 2 vs 3" and never varied it."""
    _sweep, variants = load_sweep(ROOT / "experiments" / "sweeps" / f"{name}.yaml")
    pools = {v.axes["pool"] for v in variants}
    assert len(pools) >= 2
    assert sorted((v.axes["pool"], v.axes["pool_size"]) for v in variants) == sorted(
        (p, s) for p in pools for s in ("2", "3"))
    for v in variants:
        execs = v.config.executor_names()
        assert len(execs) == int(v.axes["pool_size"]) and len(v.config.agents) == 3
        if len(execs) == 2:  # the third member distils: still a third party
            assert v.config.roles.distillers == sorted({a.name for a in v.config.agents} - set(execs))
    mixed = [v for v in variants if v.axes["pool"] == "mixed"]
    for v in mixed:  # the mixed pool executes two models whatever its size
        assert len({v.config.agent(n).model for n in v.config.executor_names()}) >= 2


@pytest.mark.slow
def test_sweep_runs_in_parallel_records_failures_resumes_and_compares(server, tmp_path,
                                                                       capsys, monkeypatch):
    from edv_ray.testing.scripted_server import ScriptedServer

    monkeypatch.setenv("WANDB_MODE", "offline")
    other = ScriptedServer({("mock", t.id): t for t in tau2_tasks("mock")}).start()
    try:
        base = small_base(server.base_url, tmp_path)
        axes = {"variant": {"one": {"models": {"scripted": {"api_base": server.base_url}}},
                            "two": {"models": {"scripted": {"api_base": other.base_url}}},
                            "boom": {"method": "boom_test"}},
                "seed": [7]}
        path = write_sweep(tmp_path, base, axes, parallel=3)
        _sweep, variants = load_sweep(path)
        assert [v.run_id for v in variants] == ["sw-one-7", "sw-two-7", "sw-boom-7"]
        assert main(["sweep", "--no-progress", path]) == 4
        out = capsys.readouterr().out
        folder = tmp_path / "out" / "sw"
        runs = folder / "runs"
        summary = json.loads((folder / "summary.json").read_text())
        for v in variants:
            assert json.loads((runs / v.run_id / "axes.json").read_text()) == {"_sweep_id": "sw", **v.axes}
        # the failing variant is recorded, and the others finished
        assert summary["sw-boom-7"]["status"] == "error"
        assert "RuntimeError: boom" in summary["sw-boom-7"]["detail"]
        assert "boom" in (runs / "sw-boom-7" / "error.txt").read_text()
        assert "sw-boom-7: error (RuntimeError: boom" in out
        assert "sweep: 2/3 variant(s) complete — resume with `edv sweep" in out
        for rid in ("sw-one-7", "sw-two-7"):
            assert summary[rid]["status"] == "complete"
            assert connect(runs / rid).execute(
                "SELECT count(*), bool_and(success) FROM episodes").fetchone() == (1, True)
        # each endpoint setting served its own variant (two servers, not the last one's)
        assert server.requests and other.requests
        models = json.loads((folder / "models.json").read_text())
        assert {k: m["variants"] for k, m in models.items()} == {
            "scripted": {"sw-one-7": "scripted", "sw-boom-7": "scripted"},
            "scripted-2": {"sw-two-7": "scripted"}}
        # every parallel variant kept its own W&B history to the end (read back from .wandb)
        assert "W&B tracking switched off" not in out
        for v in variants:
            (log,) = wandb_log.offline_logs(runs / v.run_id)
            recs = list(wandb_log.records(log))
            meta = wandb_log.run_record(recs)
            assert meta.run_group == "sw" and meta.run_id.startswith(v.run_id + "-")
            assert any("progress/elapsed_s" in h for h in wandb_log.history(recs))
            assert wandb_log.exit_code(recs) == (1 if v.run_id == "sw-boom-7" else 0)
            if v.run_id != "sw-boom-7":
                assert wandb_log.summary(recs)["pass@1/no_memory/e0/good/mock"] == 1.0
        (log,) = wandb_log.offline_logs(runs / "sw-boom-7")
        boom_id = wandb_log.run_record(list(wandb_log.records(log))).run_id
        boom_last = max(h["_step"] for h in wandb_log.history(wandb_log.records(log)))

        # resume: complete variants are skipped, the failed one runs again in its W&B run
        calls = len(server.requests) + len(other.requests)
        assert main(["sweep", "--no-progress", path]) == 4
        assert len(server.requests) + len(other.requests) == calls
        assert [len(wandb_log.offline_logs(runs / v.run_id)) for v in variants] == [1, 1, 2]
        recs = list(wandb_log.records(wandb_log.offline_logs(runs / "sw-boom-7")[1]))
        assert wandb_log.run_record(recs).run_id == boom_id
        assert min(h["_step"] for h in wandb_log.history(recs)) > boom_last

        assert main(["compare", str(folder), "--boot", "100"]) == 0
        md = (folder / "compare" / "compare.md").read_text()
        assert "variant" in md and "no_memory" in md
        # the errored variant is left out of the comparison, and said so
        assert "Left out 1 variant(s) the sweep did not complete: sw-boom-7 (error)" in md
        assert md.count("sw-boom-7") == 1 and "sw-one-7" in md

        # the sweep file changes: refused before any work, unless accepted explicitly
        capsys.readouterr()
        changed = yaml.safe_load(Path(path).read_text())
        changed["base"]["llm"]["timeout_s"] = 11
        Path(path).write_text(yaml.safe_dump(changed, sort_keys=False))
        assert main(["sweep", "--no-progress", path]) == 2
        err = capsys.readouterr().err
        assert "changed since" in err and "sw-one-7: llm.timeout_s changed" in err
        assert "--accept-changed" in err and len(err.strip().splitlines()) == 1
        assert len(server.requests) + len(other.requests) == calls
        _sweep, _variants, configs, _folder = prepare(path, accept_changed=True)
        assert configs["sw-one-7"].llm.timeout_s == 10  # started: keeps the config it had
    finally:
        other.stop()


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_promptly_with_the_sweep_resume_hint(server, tmp_path):
    """SIGINT used to wait for the running variant to finish (hours on a cluster), then
    suggest `edv run --resume`."""
    server.delay_s = 30.0  # every model answer takes 30 s: one variant runs for minutes
    base = small_base(server.base_url, tmp_path, llm={"timeout_s": 120, "max_retries": 0})
    path = write_sweep(tmp_path, base, {"seed": [0, 1, 2]}, parallel=2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "edv_ray.cli", "sweep", "--no-progress", path],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        end = time.monotonic() + 240
        summary = tmp_path / "out" / "sw" / "summary.json"
        while not (summary.is_file() and server.requests and [  # a model call in flight
                o["status"] for o in json.loads(summary.read_text()).values()] == ["running"] * 2):
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        stopped_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert stopped_s < 25.0  # the answers in flight alone would take 30 s
    assert f"interrupted: resume with `edv sweep {path}`" in err
    assert "edv run --resume" not in out + err and "Traceback" not in err
    outcomes = json.loads(summary.read_text())
    assert sorted(o["status"] for o in outcomes.values()) == ["interrupted", "interrupted", "not started"]
    for rid in outcomes:  # every run lock is free again (acquiring raises RunLockedError)
        RunLock(tmp_path / "out" / "sw" / "runs" / rid).acquire().release()


@pytest.fixture(autouse=True)
def _no_delay(server):
    yield
    server.delay_s = 0.0
