"""Self-served engines require the run's key (issue 28 D2): every engine a run starts —
the simulated engine, vLLM (here its CPU stand-in, started by the real ``VLLMServer``),
llama.cpp — starts with a random per-run key and refuses a request without it, or with
another, with HTTP 401; the run's own clients (driver and Ray workers) send it, so the run
completes; the key is in no file of the run folder (W&B's offline files included), not on
the console, not in Ray's logs and not on the engine's command line (the engine reads it
from its environment)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from rich.console import Console

from edv_ray import pipeline
from edv_ray.config import load_config_dict
from edv_ray.serving.process_server import ServerStartError
from edv_ray.serving.vllm_server import VLLMServer
from edv_ray.testing.vllm_standin import launcher
from tests.hostile.security_kit import MOCK_TASKS, episode_rows

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "experiments" / "simulated_example.yaml"
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hi"}],
        "user": "edv|agent|strong|mock|create_task_1|0|x"}


def _status(method: str, url: str, key: str | None = None, scheme: str = "Bearer", **kw) -> int:
    headers = {"Authorization": f"{scheme} {key}"} if key is not None else {}
    return httpx.request(method, url, headers=headers, timeout=10.0, **kw).status_code


def refusals(base_url: str, key: str) -> dict[str, int]:
    """The engine's answers to requests without the key, with a wrong one, with the key."""
    models, chat = base_url + "/models", base_url + "/chat/completions"
    return {"models_none": _status("GET", models), "chat_none": _status("POST", chat, json=CHAT),
            "models_wrong": _status("GET", models, "x" + key),
            "chat_wrong": _status("POST", chat, "x" + key, json=CHAT),
            "models_basic_scheme": _status("GET", models, key, scheme="Basic"),
            "models_key": _status("GET", models, key)}


REFUSED = {"models_none": 401, "chat_none": 401, "models_wrong": 401, "chat_wrong": 401,
           "models_basic_scheme": 401, "models_key": 200}


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _ray_logs() -> Path | None:
    import ray

    node = getattr(getattr(ray, "_private", None) and ray._private.worker, "_global_node", None)
    return Path(node.get_logs_dir_path()) if node is not None else None


@pytest.mark.slow
def test_simulated_run_engines_refuse_requests_without_the_run_key(ray_session, tmp_path,
                                                                  monkeypatch, capsys):
    """A real No-Memory + Judge run on the simulated engine: while it runs, its engine
    answers 401 to a request without the key or with a wrong one; the run completes (its
    workers and its judge role send the key) and the key is nowhere in the run folder."""
    from edv_ray.llm.client import served_keys
    from edv_ray.runtime import servers

    monkeypatch.setenv("WANDB_MODE", "offline")
    seen: dict = {}
    real_launch = servers.launch_servers

    def launch_and_probe(cfg, run_dir, *args, **kwargs):
        pool = real_launch(cfg, run_dir, *args, **kwargs)
        keys = served_keys([i.base_url for i in pool.infos])
        seen["keys"] = set(keys.values())
        seen["answers"] = {i.base_url: refusals(i.base_url, keys[i.base_url]) for i in pool.infos}
        seen["argv"] = [_cmdline(i.pid) for i in pool.infos]
        seen["env"] = [_environ(i.pid) for i in pool.infos]
        return pool

    monkeypatch.setattr(servers, "launch_servers", launch_and_probe)
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(output_dir=str(tmp_path / "runs"), run_id="keyed", method=["no_memory", "judge"],
               wandb={"mode": "offline", "project": "edv-keys"},
               runtime={"concurrency": 4, "workers": 1, "episode_timeout_s": 60})
    cfg["benchmark"] = {"name": "tau2", "domains": ["mock"], "split": "all", "num_tasks": None,
                        "task_ids": MOCK_TASKS, "solo": "always"}
    cfg["roles"].pop("user_simulator")
    run_cfg, run_id, run_dir = pipeline.prepare_from(load_config_dict(cfg))
    console = Console(record=True, width=200)
    result = pipeline.execute(run_cfg, run_id, run_dir, console=console, show_progress=False)

    assert len(seen["keys"]) == 1  # one random key for the run's engines
    key = seen["keys"].pop()
    assert len(key) >= 40
    assert seen["answers"] and all(a == REFUSED for a in seen["answers"].values()), seen["answers"]
    # the engine reads its key from its environment, never from its command line
    assert all(key.encode() not in argv for argv in seen["argv"])
    assert all(f"EDV_ENGINE_API_KEY={key}".encode() in env for env in seen["env"])
    assert result.complete, (result.errors, result.unfinished)
    ok, _rows, _doubled = episode_rows(run_dir)
    assert ok == 2 * len(MOCK_TASKS)  # two executors x two tasks, every call authenticated
    from edv_ray.results.views import connect

    calls = dict(connect(run_dir).execute(
        "SELECT role, count(*) FILTER (WHERE NOT ok) FROM llm_calls GROUP BY 1").fetchall())
    assert "agent" in calls and len(calls) >= 2 and set(calls.values()) == {0}, calls  # judge too
    assert list(run_dir.rglob("*.wandb"))  # W&B wrote its offline files into the run folder
    assert _files_holding(tmp_path, key) == []
    out = capsys.readouterr()
    assert key not in console.export_text() + out.out + out.err
    logs = _ray_logs()
    if logs is not None and logs.exists():
        assert _files_holding(logs, key) == []
    assert served_keys(seen["answers"]) == {}  # the stopped pool's keys are forgotten


@pytest.mark.slow  # ~20 s on 2 cores
def test_a_sweeps_shared_simulated_engine_serves_every_variant_with_its_key(ray_session,
                                                                           tmp_path, capsys):
    """The sweep's shared servers are keyed too: both variants' workers get the key (from
    the sweep process, through each run's RunState) and complete."""
    from edv_ray.cli import main
    from tests.hostile.security_kit import write_yaml

    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg.update(method=["no_memory"], runtime={"concurrency": 4, "workers": 1,
                                              "episode_timeout_s": 60})
    cfg["benchmark"] = {"name": "tau2", "domains": ["mock"], "split": "all", "num_tasks": None,
                        "task_ids": MOCK_TASKS[:1], "solo": "always"}
    cfg["roles"].pop("user_simulator")
    write_yaml(tmp_path / "base.yaml", cfg)
    sweep = write_yaml(tmp_path / "sweep.yaml", {"sweep_id": "s", "base": "base.yaml",
                                                 "output_dir": str(tmp_path / "sweeps"),
                                                 "axes": {"seed": [1, 2]}})
    assert main(["sweep", sweep]) == 0, capsys.readouterr()
    runs = [p.parent for p in (tmp_path / "sweeps").rglob("config.yaml")
            if (p.parent / "episodes").exists()]
    assert len(runs) == 2
    assert all(episode_rows(r)[0] == 2 for r in runs)  # two executors x one task, each


def _standin(tmp_path: Path, key: str | None, cls: type = VLLMServer) -> VLLMServer:
    return cls("m/standin/0", "m", "some/model", served_name="m", log_dir=str(tmp_path / "logs"),
               python=str(launcher(tmp_path)), ready_timeout_s=60.0, api_key=key)


def test_vllm_standin_like_vllm_requires_the_key_from_vllm_api_key(tmp_path):
    """The real VLLMServer passes the key in VLLM_API_KEY; the stand-in (as vLLM) then
    refuses /v1 requests without it (401) and keeps /health open for the watchdog."""
    key = "k-" + "z" * 40
    server = _standin(tmp_path, key)
    info = server.start()
    try:
        assert refusals(info.base_url, key) == REFUSED
        assert server.probe() == "ok"  # /health without a key
        assert key.encode() not in _cmdline(info.pid)
        assert key.encode() not in (tmp_path / "logs").joinpath(server.log_path.name).read_bytes()
    finally:
        server.stop()


def test_an_engine_that_ignores_its_key_is_not_started(tmp_path):
    """An engine that would serve anyone (its key given in a variable it does not read)
    fails to start, naming the problem, instead of serving unauthenticated."""

    class Deaf(VLLMServer):
        key_env = "NOT_READ_BY_THE_ENGINE"

    with pytest.raises(ServerStartError, match="without its API key"):
        _standin(tmp_path, "k-" + "y" * 40, Deaf).start()


@pytest.mark.slow
def test_llama_cpp_engine_requires_its_key(tmp_path):
    """llama-cpp-python's server (the embedded SmolLM2) with a key: every route refuses a
    request without it; the key is in its environment (API_KEY), not its argv or log."""
    from edv_ray.serving.llama_cpp_server import LlamaCppServer

    key = "k-" + "w" * 40
    server = LlamaCppServer("smol/keys/0", "smol", "smollm2-135m-instruct", "smol", n_ctx=512,
                            log_dir=str(tmp_path), api_key=key)
    info = server.start()
    try:
        assert refusals(info.base_url, key) == REFUSED
        assert key.encode() not in _cmdline(info.pid)
        assert f"API_KEY={key}".encode() in _environ(info.pid)
        assert key.encode() not in server.log_path.read_bytes()
    finally:
        server.stop()
