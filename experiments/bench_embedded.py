"""Throughput of the embedded models behind llama.cpp, measured through the one client.

For each model: start its server (the same supervised Ray actor a run uses), send a
~600-token prompt cold (prompt evaluation dominates), then the same prompt again
(prefix cache hit, generation dominates). Prints prompt tok/s, generation tok/s and the
server's peak RSS.

    .venv/bin/python experiments/bench_embedded.py [--threads 2] [--gen 128]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    import ray

    from edv_ray.config import Sampling
    from edv_ray.llm.client import CallContext, Endpoint, LLMClient
    from edv_ray.runtime.servers import llama_server_actor
    from edv_ray.serving.embedded import EMBEDDED_MODELS

    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    client = LLMClient(timeout_s=600, max_retries=0)
    prompt = ("Policy: " + "Customers may change a booking only after identity checks. " * 60
              + "\nWrite a short numbered checklist for an agent handling a change request.")
    for name in EMBEDDED_MODELS:
        actor = llama_server_actor(f"bench/{name}", name, name, name, n_ctx=4096,
                                   n_threads=args.threads)
        t0 = time.monotonic()
        info = ray.get(actor.start.remote())
        ready = time.monotonic() - t0
        ep = Endpoint(name, f"openai/{name}", info.base_url)
        ctx = CallContext(run_id="bench", stage="bench", role="agent", agent=name)
        msgs = [{"role": "user", "content": prompt}]
        cold = client.complete(ep, msgs, ctx=ctx, sampling=Sampling(max_tokens=1))
        warm = client.complete(ep, msgs, ctx=ctx, sampling=Sampling(max_tokens=args.gen))
        gen_s = max(warm.latency_s, 1e-6)
        print(f"{name}: ready {ready:.1f}s | prompt {cold.prompt_tokens} tok in "
              f"{cold.latency_s:.1f}s = {cold.prompt_tokens / cold.latency_s:.0f} tok/s (cold) | "
              f"generation {warm.completion_tokens} tok in {gen_s:.1f}s = "
              f"{warm.completion_tokens / gen_s:.1f} tok/s (prefix cached) | "
              f"server peak RSS {rss_mb(info.pid):.0f} MB", flush=True)
        ray.get(actor.stop.remote())
        ray.kill(actor)
    ray.shutdown()


if __name__ == "__main__":
    main()
