#!/usr/bin/env bash
# Issue 22's GPU runs on the lent H200 (benchmarks/RESULTS.md, runs AF-): the redesign
# (hook split, hook API 6, error codes, record format 2, one model, kir.jit for replay)
# must leave behaviour unchanged, so the whole suite but its slow builds runs on the GPU,
# then the hook-overhead and record/replay benchmarks beside their earlier runs.
# Calls on one warm machine: `bash benchmarks/gpu_issue22.sh hook` (kir built and
# installed, then tests/hook and tests/record), `... rest` (the other areas), `... bench`.
# It carries .whl (pyelftools, xxhash, jsonschema, Optuna, Dask and their needs), .debs
# (libzstd-dev, liblz4-dev, libxxhash-dev) and build/test-fixtures (the clang-22 fixtures,
# built here by the suite with this checkout's sources so that their cache key matches).
# Every log is written to a file under $OUT as it goes (never through a pipe: run AC).
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?hook, rest or bench}
export PYTHONPATH=/tmp/site CMAKE_PREFIX_PATH=/tmp/deps/usr CPATH=/tmp/deps/usr/include \
  LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
tests() {  # one named group of tests, its log under $OUT
  local name=$1; shift
  timeout "${LIMIT:-560}" python3 -m pytest -p no:cacheprovider -q -rfEs -m "not slow" --durations=15 ${PYTEST_ARGS:-} "$@" \
    >"$OUT/$name.log" 2>&1
  echo "$name: exit $?; $(tail -1 "$OUT/$name.log")"
}
if [ "$part" = hook ]; then
  {
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    for d in .debs/*.deb; do dpkg -x "$d" /tmp/deps; done
    # The -dev packages' libzstd.so/liblz4.so point at runtimes not carried: the system's.
    for l in zstd lz4; do ln -sf "$(ls /usr/lib/x86_64-linux-gnu/lib$l.so.1)" /tmp/deps/usr/lib/x86_64-linux-gnu/lib$l.so; done
    rm -rf build/cp*
    python3 -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -3
    python3 -c "import kir; print('kir', kir.__version__, 'ABI', kir.c_abi_version, 'hook API', kir.hook_api_version)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  } >"$OUT/setup.log" 2>&1
  tail -3 "$OUT/setup.log"
  LIMIT=270 tests hook tests/hook
  LIMIT=240 tests record tests/record
elif [ "$part" = hook-again ]; then  # run AF's hook part ran past 270 s: on 8 workers, a file per worker
  PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=500 tests hook tests/hook
elif [ "$part" = rest ]; then
  LIMIT=200 tests replay-jit-tune tests/replay tests/jit tests/tune
  LIMIT=330 tests core-cli tests/core tests/cli
else
  python3 benchmarks/hook_overhead.py --pairs 7 --launches 100000 >"$OUT/hook_overhead.log" 2>&1
  echo "hook_overhead: exit $?"; tail -15 "$OUT/hook_overhead.log"
  KIR_BENCH_QUICK=1 timeout 300 python3 benchmarks/record_replay.py --quick >"$OUT/record_replay.log" 2>&1
  echo "record_replay: exit $?"; tail -25 "$OUT/record_replay.log"
fi
exit 0
