"""Failures a user can cause are one clear line and exit 2 — before Ray starts and before
a run folder is made; infrastructure failure is reported as failure (exit 4); one writer
per run folder; a damaged Parquet file is named and its episode re-run on --resume."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.cli import main
from edv_ray.config import ConfigError, load_config_dict
from edv_ray.results.run_lock import RunLock
from edv_ray.results.views import connect
from edv_ray.testing.helpers import scripted_config


def _write(tmp_path, cfg: dict) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _mock(server, tmp_path, **over) -> dict:
    return scripted_config(server.base_url, tmp_path, agents=[
        {"name": "text", "model": "scripted", "prompt_strategy": "text_tools"}],
        benchmark={"domains": ["mock"], "split": "all", "num_tasks": 2, "solo": "always"}, **over)


def test_validation_authenticates(server, tmp_path, monkeypatch):
    monkeypatch.setenv("EDV_KEY", "right")
    server.required_key = "right"
    cfg = _mock(server, tmp_path)
    cfg["models"]["scripted"]["api_key_env"] = "EDV_KEY"
    pipeline.validate(load_config_dict(cfg))  # the right key passes
    monkeypatch.setenv("EDV_KEY", "wrong")
    with pytest.raises(ConfigError, match="refused the key.*EDV_KEY"):
        pipeline.validate(load_config_dict(cfg))
    server.required_key = None
    # a web server that is not an OpenAI-compatible API: 404 on /models
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    static = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=static.serve_forever, daemon=True).start()
    try:
        cfg["models"]["scripted"]["api_base"] = f"http://127.0.0.1:{static.server_address[1]}/v1"
        with pytest.raises(ConfigError, match="404"):
            pipeline.validate(load_config_dict(cfg))
    finally:
        static.shutdown()


def test_user_errors_exit_2_before_any_folder(server, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    cases = {
        "under_file": _mock(server, tmp_path, output_dir=str(blocker / "runs")),
        "num_cpus": _mock(server, tmp_path, runtime={"num_cpus": -2}),
        "ray_address": _mock(server, tmp_path, runtime={"ray_address": "127.0.0.1:1"}),
        "run_id": _mock(server, tmp_path, run_id=".."),
    }
    messages = {"under_file": "is a file", "num_cpus": "num_cpus",
                "ray_address": "nothing answers", "run_id": "run_id"}
    for name, cfg in cases.items():
        t0 = time.monotonic()
        assert main(["run", _write(tmp_path, cfg)]) == 2, name
        assert time.monotonic() - t0 < 30, name
        assert messages[name] in capsys.readouterr().err, name
    assert not (tmp_path / "runs").exists()
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("run_id: caf\xe9\n".encode("latin-1"))
    assert main(["run", str(bad)]) == 2 and "not UTF-8" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "not an edv run folder" in capsys.readouterr().err


@pytest.mark.slow
def test_all_errored_run_exits_nonzero_then_resume_completes(server, tmp_path, capsys):
    path = _write(tmp_path, _mock(server, tmp_path, llm={"timeout_s": 5, "max_retries": 0}))
    server.fail_next("500", 1000)
    assert main(["run", "--no-progress", path]) == 4
    assert "--resume" in capsys.readouterr().out
    server.clear_faults()
    run_dir = tmp_path / "runs" / "t"
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0


def test_one_writer_per_run_folder(server, tmp_path):
    cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(_mock(server, tmp_path)))
    run_dir.mkdir(parents=True)
    with RunLock(run_dir):
        with pytest.raises(ConfigError, match="lock|held|running"):
            pipeline.execute(cfg, run_id, run_dir, console=Console(quiet=True), show_progress=False)
    assert not list(Path(run_dir).rglob("*.parquet"))  # the second writer did nothing


@pytest.mark.slow
def test_damaged_parquet_is_named_and_rerun(server, tmp_path, capsys):
    path = _write(tmp_path, _mock(server, tmp_path))
    assert main(["run", "--no-progress", path]) == 0
    run_dir = tmp_path / "runs" / "t"
    victim = sorted((run_dir / "episodes").rglob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:40])  # cut short
    assert main(["report", str(run_dir)]) == 2
    assert victim.name in capsys.readouterr().err
    assert main(["run", "--no-progress", "--resume", str(run_dir)]) == 0
    n, ok = connect(run_dir).execute(
        "SELECT count(*), bool_and(status = 'ok') FROM episodes").fetchone()
    assert (n, ok) == (2, True) and victim.is_file()
