"""A scripted OpenAI-compatible chat server: the test double for model servers.

It speaks real HTTP (``/v1/models``, ``/v1/chat/completions``) so the whole path —
litellm, our client, retries, Ray workers, τ²-bench — runs for real. Which episode a
request belongs to comes from the OpenAI ``user`` field our client sets
(``edv|role|agent|domain|task_id|trial|episode_id``).

Behaviours (``mode``):
  gold     the agent replays the task's gold actions (native ``tool_calls`` when the
           request carries ``tools``, ``<tool_call>`` text otherwise), then tells the
           customer the task's communicate_info (or calls ``done`` in solo mode); the
           user greets once, then stops.
  nothing  the agent never acts ("cannot help"), the user then stops.
Faults (``fail_next(kind, n)``): the next n chat requests answer HTTP 500, hang past
the client timeout (``timeout``), return a non-JSON body (``garbage``), send the headers
and then one body byte per second for ``trickle_s`` seconds (``trickle``; defeats
per-read timeouts), or answer HTTP 401 / 404 (``401``, ``404``; not retryable).
``down(seconds)`` takes the server off the network for a while: it stops listening (new
connections are refused) and drops kept-alive connections without an answer, then listens
again on the same port. ``delay_s`` is every answer's latency (counted from the request's
arrival, so the server's own work is inside it).
``infer_untagged`` serves clients that send no tag (τ²-bench's own agents): the role and
task are inferred from the user simulator's scenario and a ref its greeting carries.
Other scripts (EDV stages) can be added with :meth:`ScriptedServer.add_script`.
``required_key``: every ``/v1`` request must carry it as a bearer token (HTTP 401
otherwise). Each recorded request carries ``_authorization`` and ``_received_at`` (time.monotonic()).
``usage``: sent as every answer's ``usage`` as is (None: counted from the text).
Its context window is reported as vLLM does (``max_model_len`` in ``/v1/models``) or,
with ``props_n_ctx``, as llama.cpp's server does (``/props``).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from edv_ray.agents.scripted_turns import agent_turn, user_turn
from edv_ray.envs.protocol import get_env
from edv_ray.simulation.server import parse_tag


DEFAULT_CONTEXT = 32768  # the context window the server reports unless a test changes it
Script = Callable[[dict[str, Any], dict[str, str]], dict[str, Any]]  # (request, tag) → message


_REF = re.compile(r"<<ref:([^/]+)/(.+?)>>")


class _QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a burst of concurrent connects (128
    # episodes in flight) overflows it and the kernel drops SYNs, which cost the client a
    # 1 s retransmit each — latency the bench would blame on the harness. Real servers
    # (uvicorn, llama.cpp) listen with a backlog in the thousands.
    request_queue_size = 2048

    def handle_error(self, request, client_address) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return  # the client gave up on a hanging answer: expected in fault tests
        super().handle_error(request, client_address)


class ScriptedServer:
    def __init__(self, tasks: dict[tuple[str, str], Any] | None = None, mode: str = "gold",
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.tasks = tasks or {}  # (domain, task_id) → τ²-bench Task
        self.mode = mode
        self.agent_modes: dict[str, str] = {}  # per-agent override of ``mode``
        self.delay_s = 0.0  # every chat answer leaves this long after its request arrived
        self.scripts: dict[str, Script] = {}
        # untagged requests (τ²-bench's own agent / user simulator): infer role and task
        self.infer_untagged = False
        self.requests: list[dict[str, Any]] = []
        self.models: list[dict[str, Any]] = [{"id": "scripted", "object": "model"}]  # /v1/models
        self._faults: list[str] = []
        self._lock = threading.Lock()
        self.hang_s = 30.0
        self.required_key: str | None = None  # set: requests without this key get 401
        self.trickle_s = 60.0  # how long a ``trickle`` answer keeps dripping
        # the context it reports: vLLM's ``max_model_len`` in /v1/models, llama.cpp's
        # ``/props`` (default_generation_settings.n_ctx); None = not reported
        self.max_model_len: int | None = DEFAULT_CONTEXT
        self.props_n_ctx: int | None = None
        # None: usage counted from the request and answer; else sent as is (hostile tests)
        self.usage: Any = None
        self.active_trickles = 0  # trickle answers still being written (the client is there)
        self._down_until = 0.0
        self._reopen_timer: threading.Timer | None = None
        self._stopped = False
        self._listen_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = self._bind(host, port)
        self._host, self._port = self._httpd.server_address[:2]
        self._thread: threading.Thread | None = None

    # ---- control ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}/v1"

    @property
    def is_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _bind(self, host: str, port: int) -> ThreadingHTTPServer:
        return _QuietHTTPServer((host, port), self._handler())

    def _serve(self) -> None:
        assert self._httpd is not None
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def start(self) -> "ScriptedServer":
        with self._listen_lock:
            self._serve()
        return self

    def _close_listener(self) -> None:
        if self._httpd is not None:
            if self._thread is not None and self._thread.is_alive():
                self._httpd.shutdown()  # (blocks forever on a server never started)
            self._httpd.server_close()
            self._httpd = None

    def stop(self) -> None:
        with self._listen_lock:
            self._stopped = True
            if self._reopen_timer is not None:
                self._reopen_timer.cancel()
            self._close_listener()

    def down(self, seconds: float) -> None:
        """Refuse connections for ``seconds`` (stop listening, drop kept-alive connections
        unanswered), then listen again on the same port. Returns at once."""
        with self._listen_lock:
            self._down_until = time.monotonic() + seconds
            if self._reopen_timer is not None:
                self._reopen_timer.cancel()
            self._close_listener()
            self._reopen_timer = threading.Timer(seconds, self._reopen)
            self._reopen_timer.daemon = True
            self._reopen_timer.start()

    def _reopen(self) -> None:
        with self._listen_lock:
            if self._stopped or self._httpd is not None:
                return
            for _ in range(50):  # the old listener's port may take a moment to free
                try:
                    self._httpd = self._bind(self._host, self._port)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise RuntimeError(f"could not listen on port {self._port} again")
            self._down_until = 0.0
            self._serve()

    def fail_next(self, kind: str, n: int) -> None:
        assert kind in ("500", "timeout", "garbage", "trickle", "401", "404")
        with self._lock:
            self._faults.extend([kind] * n)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Back to a fresh server's behaviour (gold replay, no faults, scripts, key or
        delay, the default context), its request log emptied: one server, many tests."""
        self.mode = "gold"
        self.agent_modes.clear()
        self.delay_s = 0.0
        self.clear_faults()
        self.scripts.clear()
        self.required_key = None
        self.max_model_len = DEFAULT_CONTEXT
        self.props_n_ctx = None
        self.usage = None
        self.requests.clear()

    def add_script(self, role: str, script: Script) -> None:
        """Answer requests of ``role`` (from the tag) with ``script(request, tag)``."""
        self.scripts[role] = script

    # ---- behaviours ------------------------------------------------------------------
    def _agent_gold(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        task = self.tasks[(tag["domain"], tag["task_id"])]
        info = ", ".join(task.evaluation_criteria.communicate_info or [])
        gold = get_env("tau2").simulated_player().gold_plan(task)
        return agent_turn(gold, req, f"All done. {info}".strip())

    def _user(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        text = "Hi, I need help with my request."
        if tag.get("inferred"):  # lets the untagged agent find its task
            text += f" <<ref:{tag['domain']}/{tag['task_id']}>>"
        return user_turn(req, text)

    def _infer_tag(self, req: dict[str, Any]) -> dict[str, str]:
        """No tag: a user simulator's system prompt holds its task's scenario; an agent
        finds the task in the ref its (scripted) user greeted with."""
        msgs = req.get("messages") or []
        system = "".join(m.get("content") or "" for m in msgs if m.get("role") == "system")
        for (domain, task_id), task in self.tasks.items():
            if task.user_scenario is not None and str(task.user_scenario) in system:
                return {"role": "user_sim", "domain": domain, "task_id": task_id, "inferred": "1"}
        for m in msgs:
            found = _REF.search(m.get("content") or "") if m.get("role") == "user" else None
            if found:
                return {"role": "agent", "domain": found[1], "task_id": found[2]}
        return {}

    def respond(self, req: dict[str, Any]) -> dict[str, Any]:
        tag = parse_tag(req.get("user"))
        if not tag and self.infer_untagged:
            tag = self._infer_tag(req)
        role = tag.get("role", "")
        if role in self.scripts:
            return self.scripts[role](req, tag)
        if role == "user_sim":
            return self._user(req, tag)
        if role == "agent" and self.agent_modes.get(tag.get("agent", ""), self.mode) == "gold":
            return self._agent_gold(req, tag)
        return {"role": "assistant", "content": "I am sorry, I cannot help with that."}

    # ---- HTTP ------------------------------------------------------------------------
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed
            # ACK hold every answer ~40 ms (real servers set it; uvicorn does)
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _dropped(self) -> bool:
                """While the server is down, close kept-alive connections unanswered."""
                if server.is_down:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return True
                return False

            def _trickle(self, body: bytes) -> None:
                with server._lock:
                    server.active_trickles += 1
                try:
                    n = max(len(body), int(server.trickle_s) + 2)
                    data = b" " * (n - len(body)) + body  # leading blanks: still valid JSON
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.flush()
                    end = time.monotonic() + server.trickle_s
                    for i in range(len(data)):
                        if time.monotonic() >= end:
                            break
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(1.0)
                except OSError:  # the client gave up and closed the connection
                    pass
                finally:
                    self.close_connection = True
                    with server._lock:
                        server.active_trickles -= 1

            def _refused(self) -> bool:
                """``required_key`` set: a ``/v1`` request without that bearer key gets 401
                (as vLLM's ``--api-key``: ``/health`` stays open)."""
                if server.required_key and self.path.startswith("/v1") and self.headers.get(
                        "Authorization", "") != f"Bearer {server.required_key}":
                    self.close_connection = True  # its body (if any) is left unread
                    self._send(401, b'{"error": {"message": "invalid api key"}}')
                    return True
                return False

            def do_GET(self) -> None:
                if self._dropped() or self._refused():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    data = [dict(m) for m in server.models]
                    if server.max_model_len is not None:
                        for entry in data:
                            entry["max_model_len"] = server.max_model_len
                    body = {"object": "list", "data": data}
                    self._send(200, json.dumps(body).encode())
                elif self.path.rstrip("/") == "/props" and server.props_n_ctx is not None:
                    body = {"default_generation_settings": {"n_ctx": server.props_n_ctx}}
                    self._send(200, json.dumps(body).encode())
                elif self.path.rstrip("/") == "/health":  # as vLLM and llama.cpp answer it
                    self._send(200, b"{}")
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                if self._dropped() or self._refused():
                    return
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, b'{"error": "not found"}')
                req["_authorization"] = self.headers.get("Authorization", "")
                req["_received_at"] = time.monotonic()
                with server._lock:
                    server.requests.append(req)
                    fault = server._faults.pop(0) if server._faults else None
                if fault == "500":
                    return self._send(500, b'{"error": {"message": "scripted failure"}}')
                if fault == "timeout":
                    time.sleep(server.hang_s)
                    return self._send(500, b'{"error": {"message": "late"}}')
                if fault == "garbage":
                    return self._send(200, b"<html>definitely not json")
                if fault in ("401", "404"):
                    msg = {"401": "invalid api key", "404": "no such model"}[fault]
                    return self._send(int(fault), json.dumps({"error": {"message": msg}}).encode())
                try:
                    msg = server.respond(req)
                except Exception as err:  # a script bug must be visible, not a hang
                    msg = err
                # the answer leaves `delay_s` after the request arrived: the server's own
                # parsing and scripting are inside the latency, not added to it
                wait = req["_received_at"] + server.delay_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if isinstance(msg, Exception):
                    return self._send(500, json.dumps({"error": {"message": repr(msg)}}).encode())
                prompt = sum(len(m.get("content") or "") for m in req.get("messages", [])) // 4
                completion = max(1, len(json.dumps(msg)) // 4)
                body = {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                    "created": int(time.time()), "model": req.get("model", "scripted"),
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}
                    if server.usage is None else server.usage,
                }
                if fault == "trickle":
                    return self._trickle(json.dumps(body).encode())
                self._send(200, json.dumps(body).encode())

        return Handler
