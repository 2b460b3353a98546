#!/usr/bin/env bash
# The system packages kir builds against (Debian/Ubuntu): the libzstd, liblz4,
# zlib and xxhash headers, a C++17 compiler, Python's venv module. With --tests, also what the test suite
# builds its fixtures with and compares against: clang, LLVM's tools, lld (22), LLVM's
# libraries and CMake package (llvm-22-dev: examples/proteus_client links them), flang-22
# (Fortran OpenMP offload objects: tests/core/test_openmp.py, test_omp_region.py), and
# valgrind (the hook's unload test), LLVM's OpenMP offload runtime where the distribution has it
# (liboffload-22-dev, libomp-22-dev: libomptarget.so.22.1 and libomp to link and run OpenMP
# programs, kir import-omp's and the OpenMP record tests), zsh (the completion script loads in it), rocm-device-libs
# (ROCm's ocml/ockl/oclc bitcode: kir.jit links it into AMDGPU code, tests/jit/test_jit_amdgpu.py), and the real
# ROCm HIP runtime and headers where the distribution has them (libamdhip64-dev: ROCm 5.2 in
# Debian 12; tests/hook/test_hook_real_hip.py, test_hip_abi.py skip without it). With --lint,
# clang-format and clang-tidy (22: scripts/lint.sh). Installs only what is missing.
set -euo pipefail
packages=(libzstd-dev liblz4-dev zlib1g-dev libxxhash-dev g++)
optional=()  # installed where the distribution has them
missing_optional=()
# `python3 -m venv` (scripts/venv.sh) needs ensurepip, which Debian ships apart.
python3 -c "import ensurepip, venv" 2>/dev/null || packages+=(python3-venv)
if [ "${1:-}" = "--tests" ]; then
  packages+=(clang-22 llvm-22 llvm-22-dev lld-22 flang-22 valgrind zsh)
  # Wanted unless the package lists (read, or not yet fetched) say the distribution lacks them.
  # liboffload-22-dev, libomp-22-dev: LLVM's OpenMP offload runtime (libomptarget.so.22.1, its
  # link-time name, and the libomp it needs): OpenMP programs link and run (tests/support/openmp_apps.py,
  # tests/record/test_import_omp.py; skipped without them).
  for p in libamdhip64-dev rocm-device-libs liboffload-22-dev libomp-22-dev; do
    if apt-cache show "$p" >/dev/null 2>&1 || ! ls /var/lib/apt/lists/*Packages* >/dev/null 2>&1; then
      optional+=("$p")
    fi
  done
elif [ "${1:-}" = "--lint" ]; then
  packages+=(clang-format-22 clang-tidy-22)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
for p in "${optional[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing_optional+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ ${#missing_optional[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  for p in "${missing_optional[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 && missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
