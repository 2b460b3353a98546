#!/usr/bin/env bash
# Install everything the tests need (system packages, the oracles, kir itself)
# and run the whole suite: Python, C++ under sanitizers, fuzzing, downstream CMake
# (`bash tests/run.sh tests/core/test_cache.py -x`: only what is named).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh --tests
. scripts/venv.sh  # .venv in the checkout (or the active one)
# The distribution was `kir` until 0.1, now kir-kernel-ir; both own kir/ in
# site-packages, so an old one goes first (docs/install.md).
python -m pip uninstall -y -q kir >/dev/null 2>&1 || true
python -m pip install -q cmake ninja 'pip>=25.1'  # pip 25.1: dependency groups (--group)
python -m pip install -q . --group test
python -m pytest "$@"  # the whole suite (pyproject: testpaths), or the files and options given
