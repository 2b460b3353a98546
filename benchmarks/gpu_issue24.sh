#!/usr/bin/env bash
# Issue 24's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AP-): cuFFT replay (a
# driver-loaded module's globals recorded), the tuner's hand-off to every client under a
# ULP tolerance, Mneme's measurements. What clang/LLVM build is built here and carried:
#   build/test-fixtures   python tests/support/build.py build/test-fixtures
#   build/jit_speedup     python benchmarks/jit_speedup.py build build/jit_speedup
#   build/proteus_client  examples/proteus_client, LLVM 22 linked in (docs/adopting-proteus.md)
#   .whl, .debs           wheels and -dev packages (benchmarks/gpu_setup.sh)
# Calls: `bash benchmarks/gpu_issue24.sh tests|handoff|throughput`. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?tests, handoff or throughput}
. "$(dirname "$0")/gpu_setup.sh"
export PROTEUS_CLIENT_LIB=$PWD/build/proteus_client/libproteus_client.so
gpu_setup >"$OUT/setup.log" 2>&1
tail -3 "$OUT/setup.log"
if [ "$part" = tests ]; then
  PYTEST_ARGS="-n 8 --dist loadfile -v" LIMIT=${TESTS_LIMIT:-420} tests issue24 tests/hook/test_hook_static.py \
    tests/record/test_record_module_globals.py tests/record/test_record_faults.py tests/tune/test_tune_gpu.py \
    tests/tune/test_tune_options.py tests/replay/test_replay_variants.py tests/replay/test_replay_all.py \
    tests/jit/test_proteus_client.py tests/tune/test_mneme_driver.py tests/record/test_import_mneme.py \
    tests/replay/test_replay_timing.py ${EXTRA_TESTS:-}
  grep -E "FAILED|ERROR|XPASS" "$OUT/issue24.log" | head -30
elif [ "$part" = handoff ]; then
  timeout ${HANDOFF_LIMIT:-400} python3 benchmarks/tune_handoff.py run build/jit_speedup ${HANDOFF_ARGS:-} \
    >"$OUT/tune_handoff.md" 2>"$OUT/tune_handoff.err"
  echo "tune_handoff: exit $?"; cat "$OUT/tune_handoff.md"; tail -20 "$OUT/tune_handoff.err"
elif [ "$part" = throughput ]; then  # a 100-trial study of the stencil of benchmarks/jit_speedup.cu
  rm -rf /tmp/tt && python3 -m kir record --kernels stencil3d --max-per-kernel 1 -o /tmp/tt -- \
    build/jit_speedup/app stencil 3 >"$OUT/tt-record.log" 2>&1
  timeout ${THROUGHPUT_LIMIT:-400} python3 benchmarks/tune_throughput.py /tmp/tt --trials ${TRIALS:-100} \
    --results-dir "$OUT/tt-results" ${THROUGHPUT_ARGS:-} >"$OUT/tune_throughput.md" 2>"$OUT/tune_throughput.err"
  echo "tune_throughput: exit $?"; cat "$OUT/tune_throughput.md"; tail -20 "$OUT/tune_throughput.err"
fi
exit 0
