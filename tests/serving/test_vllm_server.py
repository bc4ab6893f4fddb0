"""VLLMServer's command line, and the watchdog against a fake engine (no vLLM needed).

The fake engine is a tiny OpenAI-style HTTP server run as a child process. It answers
``/v1/models`` always and ``/health`` with 503 once a flag file exists — vLLM's
alive-but-dead state after ``EngineDeadError``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from edv_ray.serving.catalog import VLLM_SERVER_MODULE
from edv_ray.serving.vllm_server import (
    HealthWatchdog,
    SupervisedServer,
    VLLMServer,
    server_actor_options,
    supervised_actor_class,
    vllm_actor_options,
    watchdog_verdict,
)

FAKE_ENGINE = r"""
import http.server, json, os, sys
port, dead_flag = int(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    def send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        elif self.path == "/health":
            self.send(503 if os.path.exists(dead_flag) else 200, {})
        else:
            self.send(404, {"error": "not found"})
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class FakeVLLM(VLLMServer):
    """VLLMServer whose process is the fake engine; health logic is VLLMServer's own."""

    def __init__(self, dead_flag: str, **kwargs) -> None:
        super().__init__(weights="fake/model", ready_timeout_s=30, **kwargs)
        self.dead_flag = dead_flag

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", FAKE_ENGINE, str(port), self.dead_flag]


def fake_kwargs(tmp_path) -> dict:
    return {"dead_flag": str(tmp_path / "engine-dead"), "server_id": "fake/agent/0",
            "model_name": "fake", "log_dir": str(tmp_path / "logs")}


class ExitRecorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


# ---- command line ----------------------------------------------------------------------
def test_command_line_comes_from_the_catalog(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # conftest sets it for the suite
    server = VLLMServer("glm/agent/0", "glm", "glm-4.7-fp8", log_dir=str(tmp_path))
    argv = server.command(4321)
    assert argv[:3] == [sys.executable, "-m", VLLM_SERVER_MODULE]
    assert argv[argv.index("--model") + 1] == "zai-org/GLM-4.7-FP8"
    assert argv[argv.index("--served-model-name") + 1] == "glm"
    assert argv[argv.index("--tool-call-parser") + 1] == "glm47"
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "4321"]
    assert server.gpus() == 4 and server.engine == "vllm"
    assert "HF_HUB_OFFLINE" not in server.environment()  # hub weights: the hub stays reachable


def test_local_weights_and_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    server = VLLMServer("q/agent/0", "q", str(folder), served_name="qwen",
                        engine_args={"max_model_len": 16384, "enable_prefix_caching": True},
                        env={"VLLM_LOGGING_LEVEL": "DEBUG"})
    argv = server.command(1)
    assert argv[argv.index("--model") + 1] == str(folder)
    assert argv[argv.index("--max-model-len") + 1] == "16384"
    assert "--enable-prefix-caching" in argv and "hermes" in argv
    env = server.environment()
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["VLLM_NO_USAGE_STATS"] == "1"


def test_importing_the_module_imports_neither_vllm_nor_ray():
    code = ("import sys, edv_ray.serving.vllm_server, edv_ray.serving.replicas; "
            "bad = {'vllm', 'ray'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_actor_options_reserve_the_replicas_gpus():
    assert vllm_actor_options({"tensor_parallel_size": 4})["num_gpus"] == 4
    assert vllm_actor_options({"tensor_parallel_size": 4, "data_parallel_size": 2})["num_gpus"] == 8
    multi = vllm_actor_options({"tensor_parallel_size": 8, "pipeline_parallel_size": 2,
                                "distributed_executor_backend": "ray"})
    assert multi["num_gpus"] == 0  # vLLM's Ray executor places its own workers
    opts = server_actor_options(1, max_restarts=5, accelerator_type="H200")
    assert opts["max_restarts"] == 5 and opts["max_task_retries"] == 0
    assert opts["accelerator_type"] == "H200"


# ---- watchdog decision ---------------------------------------------------------------
@pytest.mark.parametrize("health, before, expected", [
    ("ok", 2, (0, False)),
    ("busy", 2, (0, False)),  # no answer, port accepting: alive, not a failure
    ("unhealthy", 0, (1, False)),
    ("unhealthy", 2, (3, True)),
    ("gone", 0, (1, True)),  # the engine process is gone: no point waiting
])
def test_watchdog_verdict(health, before, expected):
    assert watchdog_verdict(health, before, max_failures=3) == expected


def test_watchdog_counts_consecutive_failures_only():
    results = iter(["unhealthy", "ok", "unhealthy", "unhealthy", "unhealthy"])
    recorder = ExitRecorder()
    dog = HealthWatchdog(lambda: next(results), recorder, max_failures=2)
    assert [dog.check() for _ in range(4)] == [True, True, True, False]
    assert len(recorder.reasons) == 1 and "unhealthy" in recorder.reasons[0]


def test_a_probe_that_raises_counts_as_a_failure():
    def boom():
        raise RuntimeError("socket exploded")

    recorder = ExitRecorder()
    dog = HealthWatchdog(boom, recorder, max_failures=1)
    assert dog.check() is False and recorder.reasons


# ---- against the fake engine ---------------------------------------------------------
def test_alive_but_dead_engine_triggers_the_exit_path(tmp_path):
    kwargs = fake_kwargs(tmp_path)
    recorder = ExitRecorder()
    sup = SupervisedServer(FakeVLLM, kwargs, max_failures=2, interval_s=3600, exit_fn=recorder)
    try:
        info = sup.info()
        assert sup.healthy() and sup.check_or_exit()
        open(kwargs["dead_flag"], "w").close()  # the engine dies, the API process stays
        assert httpx.get(info.base_url + "/models").status_code == 200
        assert not sup.healthy()
        assert sup.check_or_exit() is True  # first failure: tolerated
        assert not recorder.reasons
        assert sup.check_or_exit() is False  # second: exit
        assert len(recorder.reasons) == 1
        assert sup.server.probe() == "gone"  # the engine was stopped before exiting
    finally:
        sup.stop()


def test_killed_engine_process_exits_at_once(tmp_path):
    recorder = ExitRecorder()
    sup = SupervisedServer(FakeVLLM, fake_kwargs(tmp_path), max_failures=5, interval_s=3600,
                           exit_fn=recorder)
    try:
        os.kill(sup.info().pid, signal.SIGKILL)
        sup.server._proc.wait(timeout=10)
        assert sup.check_or_exit() is False
        assert "gone" in recorder.reasons[0]
    finally:
        sup.stop()


def test_background_watchdog_notices_a_dead_engine(tmp_path):
    recorder = ExitRecorder()
    sup = SupervisedServer(FakeVLLM, fake_kwargs(tmp_path), max_failures=2, interval_s=0.1,
                           exit_fn=recorder)
    try:
        os.kill(sup.info().pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not recorder.reasons and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(recorder.reasons) == 1
    finally:
        sup.stop()


def test_deliberate_stop_does_not_exit(tmp_path):
    recorder = ExitRecorder()
    sup = SupervisedServer(FakeVLLM, fake_kwargs(tmp_path), max_failures=1, interval_s=0.05,
                           exit_fn=recorder)
    sup.stop()
    time.sleep(0.3)
    sup.check_or_exit()
    assert recorder.reasons == []


# ---- under Ray: a dead engine is replaced through max_restarts -----------------------
def test_ray_restarts_the_actor_when_its_engine_dies(ray_session, tmp_path):
    ray = ray_session
    # Ray workers cannot import this test module: ship FakeVLLM by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    options = server_actor_options(0, max_restarts=1, num_cpus=0)
    actor = supervised_actor_class(**options).remote(
        FakeVLLM, fake_kwargs(tmp_path), max_failures=2, interval_s=0.2)
    try:
        first = ray.get(actor.start.remote(), timeout=60)
        os.kill(first.pid, signal.SIGKILL)  # the watchdog then calls os._exit in the actor
        second, deadline = None, time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                info = ray.get(actor.info.remote(), timeout=30)
                if info.pid != first.pid:
                    second = info
                    break
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
            time.sleep(0.5)
        assert second is not None, "the actor was not restarted with a fresh engine"
        assert ray.get(actor.healthy.remote(), timeout=30)
        assert httpx.get(second.base_url.removesuffix("/v1") + "/health").status_code == 200
        ray.get(actor.stop.remote(), timeout=30)
    finally:
        ray.kill(actor, no_restart=True)
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_reserve_replicas_holds_one_bundle_per_replica(ray_session):
    ray = ray_session
    from edv_ray.serving.placement import reserve_replicas

    group, strategies = reserve_replicas(0, 2, strategy="PACK", cpus_per_replica=0.25,
                                         timeout_s=60)
    try:
        assert [s.placement_group_bundle_index for s in strategies] == [0, 1]
        assert group.bundle_specs == [{"CPU": 0.25}, {"CPU": 0.25}]
    finally:
        ray.util.remove_placement_group(group)
    with pytest.raises(TimeoutError, match="lacks the resources"):
        reserve_replicas(4, 1, strategy="STRICT_PACK", timeout_s=2)  # no GPUs here
