"""The supervisor's health probe tells a busy engine from a dead one (a real child process).

The stub engine serves one request at a time (like llama.cpp's server) and keeps
accepting connections: while one client holds it — a generation whose body never ends —
every other request waits, so the watchdog's HTTP probe gets no answer, yet the port
still accepts connections. That engine is ``busy`` and is never restarted; one whose process is gone,
or whose port stops accepting, is.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import httpx
import pytest

from edv_ray.serving.process_server import ProcessServer
from edv_ray.serving.vllm_server import SupervisedServer

ONE_AT_A_TIME_ENGINE = r"""
import http.server, json, signal, sys, threading, time
slot = threading.Lock()  # one request at a time, as llama.cpp's server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with slot:
            data = json.dumps({"object": "list", "data": [{"id": "stub"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
    def do_POST(self):  # a generation: holds the slot until its whole body has come
        with slot:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
    def log_message(self, *args):
        pass
httpd = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
httpd.daemon_threads = True
def stop_listening(*_):  # SIGUSR1: the port closes, the process lives on (wedged)
    httpd.socket.close()
    while True:
        time.sleep(3600)
signal.signal(signal.SIGUSR1, stop_listening)
httpd.serve_forever()
"""


class OneAtATimeEngine(ProcessServer):
    engine = "stub"
    probe_timeout_s = 0.5

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", ONE_AT_A_TIME_ENGINE, str(port)]


class ExitRecorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


@pytest.fixture
def supervised(tmp_path):
    recorder = ExitRecorder()
    sup = SupervisedServer(OneAtATimeEngine, {"server_id": "stub/agent/0", "model_name": "stub",
                                              "served_name": "stub", "log_dir": str(tmp_path),
                                              "ready_timeout_s": 30.0},
                           max_failures=1, interval_s=3600, exit_fn=recorder)
    try:
        yield sup, recorder
    finally:
        sup.stop()


def hold_the_engine(sup: SupervisedServer) -> socket.socket:
    """A client that keeps the engine's only request slot: its request body never ends."""
    server = sup.server
    client = socket.create_connection((server.host, server.port), timeout=5)
    client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: stub\r\n"
                   b"Content-Length: 1000\r\n\r\n{")
    return client


def test_a_busy_engine_is_alive_and_not_restarted(supervised):
    sup, recorder = supervised
    assert sup.server.probe() == "ok"
    client = hold_the_engine(sup)
    try:
        with pytest.raises(httpx.TimeoutException):  # the engine answers no one else now
            httpx.get(sup.info().base_url + "/models", timeout=0.5)
        assert sup.server.probe() == "busy"
        assert sup.healthy()
        for _ in range(3):  # max_failures=1: a single failed probe would have ended it
            assert sup.check_or_exit() is True
        assert recorder.reasons == []
    finally:
        client.close()
    assert sup.server.probe() == "ok"  # served again once the slot is free


def test_a_dead_busy_engine_is_restarted(supervised):
    sup, recorder = supervised
    client = hold_the_engine(sup)
    try:
        os.kill(sup.info().pid, signal.SIGKILL)
        sup.server._proc.wait(timeout=10)
        assert sup.check_or_exit() is False
        assert len(recorder.reasons) == 1 and "gone" in recorder.reasons[0]
    finally:
        client.close()


def test_an_engine_whose_port_stops_accepting_is_restarted(supervised):
    sup, recorder = supervised
    pid = sup.info().pid
    os.kill(pid, signal.SIGUSR1)  # closes its listening socket, keeps running
    deadline = time.monotonic() + 10
    while sup.server.accepts_connections() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sup.server._proc.poll() is None  # the process is alive...
    assert sup.server.probe() == "unhealthy"  # ...but serves no one
    assert sup.check_or_exit() is False
    assert len(recorder.reasons) == 1 and "unhealthy" in recorder.reasons[0]
