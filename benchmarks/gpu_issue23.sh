#!/usr/bin/env bash
# Issue 23's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AK-): the JIT that
# compiles on a miss, the hook's API-7 launch services, the Proteus-style C++ client and
# benchmarks/jit_speedup.py. clang and LLVM are not on the GPU host: what they build is
# built here and carried:
#   build/test-fixtures   the suite's clang-22 fixtures (python tests/support/build.py build/test-fixtures)
#   build/jit_speedup     python benchmarks/jit_speedup.py build build/jit_speedup
#   build/proteus_client  examples/proteus_client built with LLVM 22 linked in (docs/adopting-proteus.md)
#   .whl, .debs           wheels and -dev packages (benchmarks/gpu_setup.sh)
# Calls: `bash benchmarks/gpu_issue23.sh tests` (kir built, the GPU tests of the areas this
# issue touched), `... bench` (the JIT speedup table). Logs under $OUT, never through a pipe.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?tests, areas or bench}
. "$(dirname "$0")/gpu_setup.sh"
export PROTEUS_CLIENT_LIB=$PWD/build/proteus_client/libproteus_client.so
gpu_setup >"$OUT/setup.log" 2>&1
tail -3 "$OUT/setup.log"
if [ "$part" = tests ]; then
  LIMIT=200 tests jit-gpu tests/jit/test_jit_gpu.py tests/hook/test_hook_gpu.py tests/jit/test_proteus_client.py
  MARK="not slow" PYTEST_ARGS="-n 8 --dist loadfile -v" LIMIT=420 tests areas tests/jit tests/hook tests/replay tests/tune
  grep -E "FAILED|ERROR" "$OUT/areas.log" | head -30
elif [ "$part" = areas ]; then  # run AK's areas ran past 240 s: the files that use the GPU, each result named
  MARK="not slow" PYTEST_ARGS="-n 8 --dist loadfile -v" LIMIT=400 tests gpu-areas tests/replay/test_replay_all.py \
    tests/replay/test_replay_variants.py tests/tune/test_tune.py tests/tune/test_tune_gpu.py tests/hook/test_hook.py \
    tests/hook/test_hook_early.py tests/hook/test_hook_static.py tests/jit/test_jit_compile.py
  grep -E "FAILED|ERROR" "$OUT/gpu-areas.log" | head -30
elif [ "$part" = bench ]; then
  timeout 500 python3 benchmarks/jit_speedup.py run build/jit_speedup ${BENCH_ARGS:-} >"$OUT/jit_speedup.md" 2>"$OUT/jit_speedup.err"
  echo "jit_speedup: exit $?"; cat "$OUT/jit_speedup.md"; tail -20 "$OUT/jit_speedup.err"
fi
exit 0
