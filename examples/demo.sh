#!/usr/bin/env bash
# Install kir, build the example CUDA program with nvcc, and show what GPU code it holds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh
. scripts/venv.sh  # .venv in the checkout (or the active one)
# The distribution was `kir` until 0.1, now kir-kernel-ir; both own kir/ in
# site-packages, so an old one goes first (docs/install.md).
python -m pip uninstall -y -q kir >/dev/null 2>&1 || true
echo "demo: building kir from source and installing it into ${VIRTUAL_ENV:-.venv} (about a minute on 2 cores)" >&2
python -m pip install --progress-bar on .  # pip's own lines: what it builds, a spinner while it does
echo "demo: building examples/saxpy.cu with nvcc" >&2
mkdir -p build/examples
nvcc -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90] \
  --compress-mode=size examples/saxpy.cu -o build/examples/saxpy
kir inspect --kernels build/examples/saxpy
