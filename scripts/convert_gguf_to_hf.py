"""Dequantize the embedded Qwen2.5-Coder-0.5B GGUF into an HF folder that vLLM can serve.

Run with the project's python (``.venv/bin/python scripts/convert_gguf_to_hf.py``): it
locates and verifies the GGUF with ``edv_ray.serving.embedded.resolve_weights`` (sha256,
joined file cached under ~/.cache/edv-ray), then re-runs itself under ``.venv-vllm``'s
python (transformers + gguf + accelerate, from scripts/install_vllm_cpu.sh) to write
``<cache>/qwen2.5-coder-0.5b-instruct-hf``. Idempotent: a finished folder has a stamp
file naming the GGUF's sha256. Nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODEL = "qwen2.5-coder-0.5b-instruct"
ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("EDV_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
STAMP = ".edv-converted"


def convert(gguf: Path, out: Path, stamp: str) -> None:
    """In .venv-vllm: load the GGUF dequantized, save model + tokenizer as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    src, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=name, dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=name, dequantize=True))
    model.config.quantization_config = None  # the saved weights are plain bf16
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(src, gguf_file=name).save_pretrained(tmp)
    (tmp / STAMP).write_text(stamp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="target folder (default: <cache>/%s-hf)" % MODEL)
    p.add_argument("--force", action="store_true", help="convert again even if done")
    p.add_argument("--_convert", nargs=2, metavar=("GGUF", "SHA256"), help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    if args._convert:  # the second half, under .venv-vllm
        convert(Path(args._convert[0]), args.out, args._convert[1])
        return 0

    from edv_ray.serving.embedded import EMBEDDED_MODELS, cache_dir, resolve_weights

    out = args.out or cache_dir() / f"{MODEL}-hf"
    sha = EMBEDDED_MODELS[MODEL].sha256
    if not args.force and (out / STAMP).is_file() and (out / STAMP).read_text() == sha:
        print(f"[convert] already done: {out}")
        return 0
    gguf = resolve_weights(MODEL)  # verifies the checksum
    if not VLLM_PYTHON.is_file():
        sys.exit(f"[convert] {VLLM_PYTHON} missing: run scripts/install_vllm_cpu.sh first")
    print(f"[convert] {gguf} -> {out} (dequantizing to bf16)", flush=True)
    t0 = time.monotonic()
    subprocess.run([str(VLLM_PYTHON), __file__, "--out", str(out), "--_convert", str(gguf), sha],
                   check=True)
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e9
    print(f"[convert] done in {time.monotonic() - t0:.0f}s: {out} ({size:.2f} GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
