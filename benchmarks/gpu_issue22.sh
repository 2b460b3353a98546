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
. "$(dirname "$0")/gpu_setup.sh"
tests() {  # one named group of tests, its log under $OUT
  local name=$1; shift
  timeout "${LIMIT:-560}" python3 -m pytest -p no:cacheprovider -q -rfEs -m "not slow" --durations=15 ${PYTEST_ARGS:-} "$@" \
    >"$OUT/$name.log" 2>&1
  echo "$name: exit $?; $(tail -1 "$OUT/$name.log")"
}
setup() {
  gpu_setup >"$OUT/setup.log" 2>&1
  tail -3 "$OUT/setup.log"
}
if [ "$part" = hook ]; then
  setup
  LIMIT=270 tests hook tests/hook
  LIMIT=240 tests record tests/record
elif [ "$part" = hook-again ]; then  # run AF's hook part ran past 270 s: on 8 workers, a file per worker
  PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=500 tests hook tests/hook
elif [ "$part" = rest ]; then  # after run AF's fixes: kir rebuilt, AF's failures again, then the other areas
  setup  # a machine that went cold between calls starts bare
  PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=120 tests hook-fixed tests/hook/test_hook.py tests/hook/test_hook_gpu.py \
    tests/hook/test_hook_override.py tests/hook/test_hook_abi.py
  PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=240 tests replay-jit-tune tests/replay tests/jit tests/tune
  PYTEST_ARGS="-n 8 --dist loadfile" LIMIT=150 tests core-cli-gpu tests/core/test_gpu.py tests/core/test_hash_agreement.py \
    tests/core/test_model.py tests/core/test_ir.py tests/cli/test_cli_app_args.py tests/cli/test_attack_regressions_inputs.py
elif [ "$part" = side-by-side ]; then
  # The hook's launch overhead before (main at b11cd72, carried as build/old-src: `git archive
  # b11cd72 libkir bindings python CMakeLists.txt pyproject.toml README.md LICENSE`) and after
  # the redesign, on one machine, runs alternated.
  setup
  python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/oldkir build/old-src >"$OUT/old-setup.log" 2>&1
  PYTHONPATH=/tmp/oldkir:/tmp/site python3 -c "import kir; print('before:', kir.__file__, 'hook API', kir.hook_api_version)"
  for round in 1 2; do
    for who in after before; do
      pp=/tmp/site; [ "$who" = before ] && pp=/tmp/oldkir:/tmp/site
      PYTHONPATH=$pp python3 benchmarks/hook_overhead.py --pairs 7 --launches 100000 >"$OUT/overhead-$who-$round.log" 2>&1
      echo "== $who, round $round (exit $?)"; grep -E "^\| (bare|hook)" "$OUT/overhead-$who-$round.log"
    done
  done
else
  # The unload test's app alone, bare and under the hook (run AF: 372 s for the test's 2 x 2000 cycles)
  python3 - <<'PY'
import glob, os, pathlib, subprocess, time, kir
f = pathlib.Path(sorted(glob.glob("build/test-fixtures/*/"))[0])
hook = pathlib.Path(kir.__file__).parent / "lib" / "libkir_hook.so"
for preload in ("", str(hook)):
    t = time.perf_counter()
    r = subprocess.run([f / "unload_app", f / "libunload_big.so", "300", "rss"], capture_output=True,
                       env={**os.environ, "LD_PRELOAD": preload})
    print(f"unload_app 300 cycles, LD_PRELOAD={preload or '(none)'}: exit {r.returncode}, {time.perf_counter() - t:.1f} s")
PY
  python3 benchmarks/hook_overhead.py --pairs 7 --launches 100000 >"$OUT/hook_overhead.log" 2>&1
  echo "hook_overhead: exit $?"; tail -15 "$OUT/hook_overhead.log"
  KIR_BENCH_QUICK=1 timeout 300 python3 benchmarks/record_replay.py --quick >"$OUT/record_replay.log" 2>&1
  echo "record_replay: exit $?"; tail -25 "$OUT/record_replay.log"
fi
exit 0
