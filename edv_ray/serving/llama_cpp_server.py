"""llama.cpp (llama-cpp-python's OpenAI-compatible server) behind the serving protocol.

One server answers one request at a time and keeps one prefix cache, so the launcher
gives roles their own instances (see :mod:`edv_ray.runtime.servers`).

Its API key (``api_key``) goes in the environment variable ``API_KEY``, which the
server's settings (pydantic-settings, no prefix) read as ``--api_key``: every route,
``/v1/models`` included, then requires ``Authorization: Bearer <key>`` (measured with
llama-cpp-python 0.3.36). The command line never carries it.
"""

from __future__ import annotations

import os
import sys

from edv_ray.serving.embedded import resolve_weights
from edv_ray.serving.process_server import ProcessServer


class LlamaCppServer(ProcessServer):
    engine = "llama_cpp"
    key_env = "API_KEY"
    # no HTTP probe: the server answers one request at a time, so a probe queued behind a
    # long generation would time out; liveness (process alive, port accepting) decides
    health_path = None

    def __init__(
        self,
        server_id: str,
        model_name: str,
        weights: str,
        served_name: str,
        n_ctx: int = 8192,
        n_threads: int = 2,
        engine_args: dict | None = None,
        log_dir: str | None = None,
        host: str = "127.0.0.1",
        api_key: str | None = None,
    ) -> None:
        super().__init__(server_id, model_name, served_name, log_dir=log_dir, host=host,
                         api_key=api_key)
        self.weights_path = str(resolve_weights(weights))
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.engine_args = dict(engine_args or {})

    def command(self, port: int) -> list[str]:
        argv = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", self.weights_path,
            "--model_alias", self.served_name,
            "--host", self.host,
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
        ]
        for key, value in self.engine_args.items():
            argv += [f"--{key}", str(value)]
        return argv

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(self.n_threads))
        return env
