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
the client timeout (``timeout``) or return a non-JSON body (``garbage``).
Other scripts (EDV stages) can be added with :meth:`ScriptedServer.add_script`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Script = Callable[[dict[str, Any], dict[str, str]], dict[str, Any]]  # (request, tag) → message


def parse_tag(user_field: str | None) -> dict[str, str]:
    parts = (user_field or "").split("|")
    keys = ["edv", "role", "agent", "domain", "task_id", "trial", "episode_id"]
    return dict(zip(keys, parts)) if parts and parts[0] == "edv" else {}


def _tool_names(req: dict[str, Any]) -> set[str]:
    names = {t.get("function", {}).get("name") for t in req.get("tools") or []}
    system = " ".join(m.get("content") or "" for m in req["messages"] if m["role"] == "system")
    if '"name": "done"' in system:
        names.add("done")
    return names


def _agent_calls_so_far(messages: list[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        if m["role"] != "assistant":
            continue
        n += len(m.get("tool_calls") or [])
        n += (m.get("content") or "").count("<tool_call>")
    return n


def _call_message(name: str, args: dict[str, Any], native: bool) -> dict[str, Any]:
    if native:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{uuid.uuid4().hex[:10]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}
    body = json.dumps({"name": name, "arguments": args})
    return {"role": "assistant", "content": f"<tool_call>\n{body}\n</tool_call>"}


class ScriptedServer:
    def __init__(self, tasks: dict[tuple[str, str], Any] | None = None, mode: str = "gold",
                 host: str = "127.0.0.1") -> None:
        self.tasks = tasks or {}  # (domain, task_id) → τ²-bench Task
        self.mode = mode
        self.agent_modes: dict[str, str] = {}  # per-agent override of ``mode``
        self.delay_s = 0.0  # added to every chat answer (to make runs slow enough to kill)
        self.scripts: dict[str, Script] = {}
        self.requests: list[dict[str, Any]] = []
        self._faults: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self.hang_s = 30.0

    # ---- control ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def fail_next(self, kind: str, n: int) -> None:
        assert kind in ("500", "timeout", "garbage")
        with self._lock:
            self._faults.extend([kind] * n)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def add_script(self, role: str, script: Script) -> None:
        """Answer requests of ``role`` (from the tag) with ``script(request, tag)``."""
        self.scripts[role] = script

    # ---- behaviours ------------------------------------------------------------------
    def _agent_gold(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        task = self.tasks[(tag["domain"], tag["task_id"])]
        crit = task.evaluation_criteria
        actions = [a for a in (crit.actions or []) if a.requestor == "assistant"]
        native = bool(req.get("tools"))
        n = _agent_calls_so_far(req["messages"])
        if n < len(actions):
            return _call_message(actions[n].name, dict(actions[n].arguments), native)
        if "done" in _tool_names(req):
            return _call_message("done", {}, native)
        info = ", ".join(crit.communicate_info or [])
        return {"role": "assistant", "content": f"All done. {info}".strip()}

    def _user(self, req: dict[str, Any], tag: dict[str, str]) -> dict[str, Any]:
        own_turns = sum(1 for m in req["messages"] if m["role"] == "assistant")
        text = "Hi, I need help with my request." if own_turns == 0 else "Thanks. ###STOP###"
        return {"role": "assistant", "content": text}

    def respond(self, req: dict[str, Any]) -> dict[str, Any]:
        tag = parse_tag(req.get("user"))
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

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    body = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                    self._send(200, json.dumps(body).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, b'{"error": "not found"}')
                req["_authorization"] = self.headers.get("Authorization", "")
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
                if server.delay_s:
                    time.sleep(server.delay_s)
                try:
                    msg = server.respond(req)
                except Exception as err:  # a script bug must be visible, not a hang
                    return self._send(500, json.dumps({"error": {"message": repr(err)}}).encode())
                prompt = sum(len(m.get("content") or "") for m in req.get("messages", [])) // 4
                completion = max(1, len(json.dumps(msg)) // 4)
                body = {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                    "created": int(time.time()), "model": req.get("model", "scripted"),
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion},
                }
                self._send(200, json.dumps(body).encode())

        return Handler
