#!/usr/bin/env bash
# Issue 25's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AV-): the CUDA half of
# the replay backends (kir/replay/backends.py) and, later, of the vendor-neutral recorder,
# run against the real driver before they land. Carried as for gpu_issue24.sh:
#   build/test-fixtures   python tests/support/build.py build/test-fixtures
#   build/jit_speedup     python benchmarks/jit_speedup.py build build/jit_speedup
#   build/proteus_client  examples/proteus_client, LLVM 22 linked in (docs/adopting-proteus.md)
#   .whl, .debs           wheels and -dev packages (benchmarks/gpu_setup.sh)
# Calls: `bash benchmarks/gpu_issue25.sh tests|jitclient`. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?tests}
. "$(dirname "$0")/gpu_setup.sh"
export PROTEUS_CLIENT_LIB=$PWD/build/proteus_client/libproteus_client.so
if [ ! -e /tmp/kir-gpu-setup-done ]; then  # once per machine: several parts in one call
  gpu_setup >"$OUT/setup.log" 2>&1 && touch /tmp/kir-gpu-setup-done
  tail -3 "$OUT/setup.log"
fi
if [ "$part" = tests ]; then
  MARK="not slow" PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=${TESTS_LIMIT:-480} tests issue25 tests/replay tests/record \
    tests/tune tests/hook/test_hook_static.py tests/hook/test_hook_rdc.py tests/jit/test_proteus_client.py \
    tests/core/test_cache_trust.py tests/jit/test_jit_gpu.py tests/jit/test_jit_client.py tests/hook/test_hook_gpu.py \
    tests/hook/test_hook_counts.py ${EXTRA_TESTS:-}
  grep -E "FAILED|ERROR|XPASS" "$OUT/issue25.log" | head -30
elif [ "$part" = jitclient ]; then  # the JIT client's per-launch cost since it asks the hook for the arch
  timeout ${BENCH_LIMIT:-200} python3 benchmarks/jit_client.py >"$OUT/jit_client.md" 2>"$OUT/jit_client.err"
  echo "jit_client: exit $?"; cat "$OUT/jit_client.md"; tail -5 "$OUT/jit_client.err"
fi
exit 0
