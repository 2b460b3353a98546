#!/usr/bin/env bash
# The system packages kir builds against (Debian/Ubuntu): the libzstd, liblz4,
# zlib and xxhash headers, a C++17 compiler, Python's venv module. With --tests, also what the test suite
# builds its fixtures with and compares against: clang, LLVM's tools, lld (22), LLVM's
# libraries and CMake package (llvm-22-dev: examples/proteus_client links them), and
# valgrind (the hook's unload test), zsh (the completion script loads in it), Debian's ROCm 5.2
# HIP runtime libamdhip64.so.5 (the hook passes its calls and errors through). With --lint,
# clang-format and clang-tidy (22: scripts/lint.sh). Installs only what is missing.
set -euo pipefail
packages=(libzstd-dev liblz4-dev zlib1g-dev libxxhash-dev g++)
# `python3 -m venv` (scripts/venv.sh) needs ensurepip, which Debian ships apart.
python3 -c "import ensurepip, venv" 2>/dev/null || packages+=(python3-venv)
if [ "${1:-}" = "--tests" ]; then
  packages+=(clang-22 llvm-22 llvm-22-dev lld-22 valgrind zsh libamdhip64-5)
elif [ "${1:-}" = "--lint" ]; then
  packages+=(clang-format-22 clang-tidy-22)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
