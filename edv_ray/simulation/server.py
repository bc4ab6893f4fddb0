"""The simulated engine's OpenAI-compatible server: a threaded HTTP server with no model.

:class:`Simulator` answers one chat request from its tag (``edv|role|agent|domain|task|
trial|episode``): acting roles through :mod:`.acting`, every other role through
:mod:`.stages`. It keeps no state between requests, so a restarted server (or a resumed
run) answers the same. :class:`SimulatedServer` runs it as a child process behind the
serving protocol (start / info / healthy / stop), like the llama.cpp and vLLM engines.

Run by hand: ``python -m edv_ray.simulation.server --spec SPEC.json --port 8000``
(SPEC: ``{"served_name", "profile", "benchmarks"}``). With ``EDV_ENGINE_API_KEY`` set in its
environment it requires that key on every request (``Authorization: Bearer``; HTTP 401
otherwise); the spec file never holds it.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from edv_ray.config_simulation import SimulationProfile
from edv_ray.serving.process_server import ProcessServer
from edv_ray.simulation.acting import Acting
from edv_ray.simulation.codec import Codec
from edv_ray.simulation.planted import UnknownAgent
from edv_ray.simulation.stages import StageAnswers
from edv_ray.simulation.world import World

ACTING_ROLES = ("agent", "user_sim")
KEY_ENV = "EDV_ENGINE_API_KEY"  # where the engine process reads its API key


def parse_tag(user_field: str | None) -> dict[str, str]:
    """``edv|role|agent|domain|task_id|trial|episode_id`` → fields. Task ids may hold ``|``
    (τ²-bench telecom's do); the other fields never do."""
    parts = (user_field or "").split("|")
    if len(parts) < 7 or parts[0] != "edv":
        return {}
    return dict(edv="edv", role=parts[1], agent=parts[2], domain=parts[3],
                task_id="|".join(parts[4:-2]), trial=parts[-2], episode_id=parts[-1])


class BadRequest(ValueError):
    """A request the engine cannot answer (no tag, an agent without a profile entry)."""


class Simulator:
    def __init__(self, profile: SimulationProfile | dict, benchmarks: list[dict] | None = None) -> None:
        self.profile = SimulationProfile.model_validate(profile)
        self.codec = Codec(self.profile.tag_salt)
        self.world = World(self.profile, benchmarks or [])
        self.acting = Acting(self)
        self.stages = StageAnswers(self)

    def respond(self, req: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for one chat request."""
        tag = parse_tag(req.get("user"))
        if not tag:
            raise BadRequest("no edv tag in the request's `user` field: the simulated engine "
                             "answers only edv-ray's client")
        try:
            if tag["role"] == "agent":
                return self.acting.agent(req, tag)
            if tag["role"] == "user_sim":
                return self.acting.user(req, tag)
            return {"role": "assistant", "content": self.stages.answer(req, tag)}
        except (UnknownAgent, KeyError) as err:  # no profile entry, task or benchmark section
            raise BadRequest(str(err.args[0] if err.args else err)) from None

    def warm_up(self) -> None:
        """Load what episodes need before the first request (each benchmark's player:
        τ²-bench's write tools, the file benchmarks' splits — loaded while serving, they
        starved the health probe and the watchdog restarted the engine)."""
        self.world.warm_up()


def completion(req: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any]:
    prompt = sum(len(m.get("content") or "") for m in req.get("messages", [])) // 4
    out = max(1, len(json.dumps(msg)) // 4)
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
            "created": int(time.time()), "model": req.get("model", "simulated"),
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 2048  # bursts of concurrent connects must not overflow the backlog


def http_server(sim: Simulator, served_name: str, host: str = "127.0.0.1", port: int = 0,
                api_key: str | None = None) -> ThreadingHTTPServer:
    """``api_key``: every request must carry it as a bearer token (else 401)."""
    models = json.dumps({"object": "list", "data": [{"id": served_name, "object": "model"}]}).encode()
    expected = f"Bearer {api_key}".encode() if api_key else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:
            pass

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code: int, message: str) -> None:
            self._send(code, json.dumps({"error": {"message": message, "type": "simulated"}}).encode())

        def _refused(self) -> bool:
            if expected is None:
                return False
            given = self.headers.get("Authorization", "").encode()
            if hmac.compare_digest(given, expected):
                return False
            self.close_connection = True  # the body (if any) is left unread
            self._error(401, "invalid API key")
            return True

        def do_GET(self) -> None:
            if self._refused():
                return
            if self.path.rstrip("/").endswith("/models"):
                return self._send(200, models)
            self._error(404, "not found")

        def do_POST(self) -> None:
            t0 = time.monotonic()
            if self._refused():
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self._error(404, "not found")
            try:
                req = json.loads(body or b"{}")
                msg = sim.respond(req)
            except (BadRequest, json.JSONDecodeError) as err:
                return self._error(400, str(err))
            except Exception as err:  # noqa: BLE001 - an engine bug must be visible, not a hang
                print(f"simulated engine error: {err!r}", file=sys.stderr, flush=True)
                return self._error(500, f"simulated engine error: {err!r}")
            wait = sim.profile.latency_s - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)
            self._send(200, json.dumps(completion(req, msg)).encode())

    return _HTTPServer((host, port), Handler)


class SimulatedServer(ProcessServer):
    """The engine as a child process on a free port (loopback; on a cluster its node's
    address), requiring ``api_key`` when given (see ProcessServer)."""

    engine = "simulated"
    key_env = KEY_ENV

    def __init__(self, server_id: str, model_name: str, served_name: str, profile: dict,
                 benchmarks: list[dict] | None = None, log_dir: str | None = None,
                 host: str = "127.0.0.1", api_key: str | None = None) -> None:
        super().__init__(server_id, model_name, served_name, log_dir=log_dir, host=host,
                         ready_timeout_s=300.0, api_key=api_key)
        self.spec = {"served_name": served_name, "profile": profile, "benchmarks": benchmarks or []}

    def command(self, port: int) -> list[str]:
        path = self.log_path.with_suffix(".spec.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.spec))
        return [sys.executable, "-m", "edv_ray.simulation.server", "--spec", str(path),
                "--host", self.host, "--port", str(port)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    sim = Simulator(spec["profile"], spec.get("benchmarks"))
    sim.warm_up()
    httpd = http_server(sim, spec.get("served_name", "simulated"), args.host, args.port,
                        api_key=os.environ.get(KEY_ENV) or None)
    print(f"simulated engine on http://{args.host}:{args.port}/v1", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
