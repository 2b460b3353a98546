#!/usr/bin/env bash
# Issue 25's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AV-): the CUDA half of
# the replay backends (kir/replay/backends.py) and, later, of the vendor-neutral recorder,
# run against the real driver before they land. Carried as for gpu_issue24.sh:
#   build/test-fixtures   python tests/support/build.py build/test-fixtures
#   build/jit_speedup     python benchmarks/jit_speedup.py build build/jit_speedup
#   build/proteus_client  examples/proteus_client, LLVM 22 linked in (docs/adopting-proteus.md)
#   .whl, .debs           wheels and -dev packages (benchmarks/gpu_setup.sh)
# Calls: `bash benchmarks/gpu_issue25.sh tests`. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?tests}
. "$(dirname "$0")/gpu_setup.sh"
export PROTEUS_CLIENT_LIB=$PWD/build/proteus_client/libproteus_client.so
gpu_setup >"$OUT/setup.log" 2>&1
tail -3 "$OUT/setup.log"
if [ "$part" = tests ]; then
  MARK="not slow" PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=${TESTS_LIMIT:-480} tests issue25 tests/replay tests/record \
    tests/tune tests/hook/test_hook_static.py tests/hook/test_hook_rdc.py tests/jit/test_proteus_client.py \
    tests/core/test_cache_trust.py ${EXTRA_TESTS:-}
  grep -E "FAILED|ERROR|XPASS" "$OUT/issue25.log" | head -30
fi
exit 0
