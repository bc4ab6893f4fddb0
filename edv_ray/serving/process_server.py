"""An OpenAI-compatible server run as a child process on a free port of ``host``.

Engine modules (llama.cpp, vLLM) only say which command line starts them; this class
owns the process: start, wait until ``GET /v1/models`` answers, health, clean stop.
With ``api_key`` the engine requires that bearer key (given to it in the environment
variable its engine reads, ``key_env``: never on its command line, in its log or in a file)
and this class's own probes send it.

Health (:meth:`ProcessServer.probe`, what the supervisor's watchdog reads): ``gone`` when the
process exited; else an HTTP answer on ``health_path`` decides (200: ``ok``, any other
status: ``unhealthy``); with no answer within ``probe_timeout_s`` the liveness check does —
the listening port accepts a TCP connection: ``busy`` (alive, counted as healthy: an engine
queueing requests under load answers late, and restarting it would lose its work), or it
refuses: ``unhealthy``. A process that stops calling ``accept`` still passes until its
listen backlog fills; its callers' timeouts and replica fail-over cover that window.
The child gets ``PR_SET_PDEATHSIG`` (Linux) so it dies with the process that started
it, i.e. with its Ray actor, also when the driver or the actor is killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import httpx

from edv_ray.serving.protocol import ServerInfo


Health = Literal["ok", "busy", "unhealthy", "gone"]


class ServerStartError(RuntimeError):
    """The engine process exited or did not answer in time (its log tail is included)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


class ProcessServer:
    """Base for engines. Subclasses implement :meth:`command` (argv for the server)."""

    engine = "process"
    key_env: str | None = None  # the environment variable the engine reads its API key from
    # the route whose HTTP 200 says the engine serves; None: liveness alone (process, port)
    health_path: str | None = "/v1/models"
    probe_timeout_s = 5.0  # an HTTP probe, and the liveness check's TCP connect

    def __init__(
        self,
        server_id: str,
        model_name: str,
        served_name: str,
        log_dir: str | None = None,
        host: str = "127.0.0.1",
        ready_timeout_s: float = 300.0,
        api_key: str | None = None,
    ) -> None:
        self.server_id = server_id
        self.model_name = model_name
        self.served_name = served_name
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.api_key = api_key  # None: the engine answers anyone (direct, private use)
        self.log_path = Path(log_dir or "/tmp") / f"server-{server_id.replace('/', '_')}.log"
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None

    # ---- to override ---------------------------------------------------------------
    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def keyed_environment(self) -> dict[str, str]:
        """:meth:`environment` with the engine's key variable set to ``api_key`` (or
        removed: a variable inherited from the caller's shell never keys an engine whose
        clients do not know the key)."""
        env = self.environment()
        if self.key_env:
            env.pop(self.key_env, None)
            if self.api_key:
                env[self.key_env] = self.api_key
        return env

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    # ---- protocol ------------------------------------------------------------------
    def start(self) -> ServerInfo:
        if self._proc is not None and self._proc.poll() is None:
            return self.info()
        self.port = free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            self.command(self.port),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.keyed_environment(),
            preexec_fn=_die_with_parent,
        )
        log.close()
        self._wait_ready()
        self._check_keyed()
        return self.info()

    def info(self) -> ServerInfo:
        if self._proc is None or self.port is None:
            raise RuntimeError(f"server {self.server_id} is not started")
        return ServerInfo(
            server_id=self.server_id,
            model_name=self.model_name,
            served_name=self.served_name,
            base_url=f"http://{self.host}:{self.port}/v1",
            engine=self.engine,
            pid=self._proc.pid,
        )

    def probe(self) -> Health:
        """``gone`` / ``ok`` / ``busy`` / ``unhealthy``, as the module docstring says."""
        if self._proc is None or self._proc.poll() is not None:
            return "gone"
        if self.health_path is not None:
            try:
                r = httpx.get(f"http://{self.host}:{self.port}{self.health_path}",
                              headers=self.auth_headers(), timeout=self.probe_timeout_s)
                return "ok" if r.status_code == 200 else "unhealthy"
            except httpx.HTTPError:
                pass  # no answer: busy, or not listening any more
        if not self.accepts_connections():
            return "unhealthy"
        return "ok" if self.health_path is None else "busy"

    def accepts_connections(self) -> bool:
        """The liveness check: the engine's port accepts a TCP connection."""
        try:
            socket.create_connection((self.host, self.port), timeout=self.probe_timeout_s).close()
            return True
        except OSError:
            return False

    def healthy(self) -> bool:
        return self.probe() in ("ok", "busy")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    # ---- internals -----------------------------------------------------------------
    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        url = f"http://{self.host}:{self.port}/v1/models"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise ServerStartError(
                    f"{self.engine} server {self.server_id} exited with code "
                    f"{self._proc.returncode}; log {self.log_path}:\n{self._log_tail()}"
                )
            try:
                code = httpx.get(url, headers=self.auth_headers(), timeout=2.0).status_code
                if code == 200:
                    return
                if code in (401, 403):
                    self.stop()
                    raise ServerStartError(f"{self.engine} server {self.server_id} refused "
                                           f"its own API key (HTTP {code})")
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise ServerStartError(
            f"{self.engine} server {self.server_id} did not answer within "
            f"{self.ready_timeout_s:.0f}s; log {self.log_path}:\n{self._log_tail()}"
        )

    def _check_keyed(self) -> None:
        """A keyed engine must refuse a request without the key: one that ignores its key
        (an engine version that does not read ``key_env``) would serve anyone."""
        if not self.api_key:
            return
        try:
            code = httpx.get(f"http://{self.host}:{self.port}/v1/models", timeout=5.0).status_code
        except httpx.HTTPError:
            return  # no answer either way (it answered the keyed probe just before)
        if code not in (401, 403):
            self.stop()
            raise ServerStartError(f"{self.engine} server {self.server_id} answered a request "
                                   f"without its API key ({code}): it would serve anyone")

    def __del__(self) -> None:  # best effort; the death signal covers hard kills
        try:
            self.stop()
        except Exception:
            pass
