"""A CPU stand-in for vLLM's OpenAI server process, for tests of the GPU cluster path.

vLLM on GPUs is the one piece a CPU machine cannot run. Everything around it — the
catalog's command line, the supervised server actor, its GPU reservation and placement
group, the watchdog, routing — is the real code when a model config names this as its
engine's interpreter (``python:``, see :func:`launcher`): ``VLLMServer`` then starts

    <launcher> -m vllm.entrypoints.openai.api_server --model M --served-model-name N
               --tensor-parallel-size 4 ... --host H --port P

and this module parses that command line as vLLM would, checks what vLLM checks at start
that placement decides — a process given GPUs must see ``tensor_parallel_size x
pipeline_parallel_size x data_parallel_size`` of them in ``CUDA_VISIBLE_DEVICES`` (Ray sets
it from the actor's reserved GPUs; unset means a CPU build) — and serves the scripted OpenAI-compatible server on
``--host``/``--port`` with vLLM's ``/health`` and ``/v1/models`` (served name,
``max_model_len``). Like vLLM, it requires an API key when given one (``--api-key`` or the
``VLLM_API_KEY`` environment variable, which is how ``VLLMServer`` passes it): every
``/v1`` request without ``Authorization: Bearer <key>`` gets HTTP 401, ``/health`` stays
open. Chat answers follow the scripted server's ``nothing`` behaviour (the
agent cannot help, the simulated user greets and stops), so no benchmark data is loaded;
``--standin-delay-s`` sets every answer's latency. Other vLLM flags are accepted and
ignored.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import threading
from pathlib import Path


def parse(argv: list[str]) -> argparse.Namespace:
    if argv[:1] == ["-m"]:
        argv = argv[2:]  # "-m vllm.entrypoints.openai.api_server": we are that module
    p = argparse.ArgumentParser(prog="vllm-standin")
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-model-len", type=int, default=None)
    for size in ("tensor", "pipeline", "data"):
        p.add_argument(f"--{size}-parallel-size", type=int, default=1)
    p.add_argument("--api-key", default=None)
    p.add_argument("--standin-delay-s", type=float, default=0.0)
    args, _vllm_flags = p.parse_known_args(argv)
    return args


def visible_gpus() -> list[str]:
    return [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]


def main(argv: list[str] | None = None) -> int:
    from edv_ray.testing.scripted_server import ScriptedServer

    args = parse(sys.argv[1:] if argv is None else argv)
    world = args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size
    gpus = visible_gpus()
    if "CUDA_VISIBLE_DEVICES" in os.environ and len(gpus) < world:  # unset: a CPU build
        print(f"vllm-standin: the engine needs {world} GPUs (TP x PP x DP) but sees "
              f"{len(gpus)} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})",
              file=sys.stderr, flush=True)
        return 1
    server = ScriptedServer(mode="nothing", host=args.host, port=args.port)
    server.delay_s = args.standin_delay_s
    server.required_key = args.api_key or os.environ.get("VLLM_API_KEY") or None  # as vLLM
    name = args.served_model_name or args.model
    server.models = [{"id": name, "object": "model", "root": args.model,
                      "max_model_len": args.max_model_len}]
    server.start()
    print(f"vllm-standin: {name} on {args.host}:{args.port}, GPUs {','.join(gpus) or '-'}",
          flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


def launcher(folder: Path, python: str = sys.executable) -> Path:
    """An executable to give as a vLLM model's ``python:``: it runs this stand-in with the
    interpreter and the ``edv_ray`` of this process (the engine's environment drops
    PYTHONPATH, so the path is written into the script)."""
    root = Path(__file__).resolve().parents[2]
    path = folder / "vllm-standin"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{root}" exec "{python}" -m edv_ray.testing.vllm_standin "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


if __name__ == "__main__":
    sys.exit(main())
