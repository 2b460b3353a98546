#!/usr/bin/env bash
# The GPU part of kir's results (benchmarks/RESULTS.md), as run on a lent H200
# machine through the device tool: it has nvcc, Python, nanobind, llvmlite and
# cuda-bindings, but no pytest, no clang and no -dev headers, so those travel as
# wheels (.whl) and Debian packages (.debs) unpacked under /tmp. The clang-built
# fixtures (rec_clang_ir: Proteus-embedded IR for `kir replay --code ir`) come
# from this checkout's build/test-fixtures when the run carries it (build.py
# then uses that cache as it is); without it their tests skip.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
for d in .debs/*.deb; do dpkg -x "$d" /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr CPATH=/tmp/deps/usr/include \
  LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
python3 -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -3
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -m pytest tests/core/test_gpu.py tests/hook/test_hook_gpu.py tests/record/test_record_gpu.py \
    tests/core/test_hash_agreement.py tests/hook/test_hook_unload.py -v -rs \
    -p no:cacheprovider 2>&1 | tail -90
  python3 benchmarks/hook_overhead.py --pairs 7 --launches 100000
  python3 benchmarks/record_replay.py ${KIR_BENCH_QUICK:+--quick}
} 2>&1 | tee "$OUT/gpu.log"
