#!/usr/bin/env bash
# Issue 21's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AA-): items 1, 2, 7
# and 17 as a user meets them, plus the GPU tests of the code the issue changed.
# Two device calls on one warm machine: `bash benchmarks/gpu_issue21.sh items` (kir built
# and installed, then items 1, 2, 7, 16 and 17), then `... rest` (the other GPU tests), carrying .whl (pyelftools,
# xxhash, jsonschema and its needs, optuna and its needs), .debs (libzstd-dev, liblz4-dev, libxxhash-dev)
# and build/test-fixtures (the clang-22 fixtures, built here with this checkout's
# sources so that their cache key matches).
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?items or rest}
. "$(dirname "$0")/gpu_setup.sh"
run() {  # one named group of tests, its log under $OUT
  local name=$1; shift
  python3 -m pytest -p no:cacheprovider -rs -v "$@" 2>&1 | tail -60 | tee "$OUT/$name.log"
}
if [ "$part" = items ]; then
{
gpu_setup
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} 2>&1 | tee "$OUT/setup.log"
# Item 1: a cache entry (and a whole cache) planted by uid 65534 is refused on the GPU.
run item1 tests/jit/test_jit_gpu.py tests/core/test_cache_trust.py
# Items 2 and 7: a guard-page app with its own SIGSEGV handler, a real crash, ~4000 app
# threads under RLIMIT_NPROC, all under `kir record` on the GPU.
run items2-7 tests/record/test_record_faults.py tests/record/test_record_crash.py tests/record/test_record_faults_cpu.py
# Item 17: a library that registers from its constructor (the Proteus layout) under two
# clients; item 16: stub-runtime tests with the machine's LD_LIBRARY_PATH (if any) kept.
run item17 tests/hook/test_hook_early.py tests/hook/test_hook_static.py tests/hook/test_hook_jit_args.py
exit 0
fi
# What the issue's other items changed underneath: whole-region reads (item 6), the
# kernel-name patterns (item 3), the rest of the GPU tests.
run gpu-rest tests/record/test_record_gpu.py tests/replay/test_replay_variants.py tests/tune/test_tune_gpu.py tests/core/test_gpu.py \
  tests/hook/test_hook_gpu.py tests/core/test_hash_agreement.py tests/hook/test_kernel_pattern.py tests/hook/test_hook_override.py \
  tests/hook/test_hook_counts.py tests/jit/test_jit_client.py
