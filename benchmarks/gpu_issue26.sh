#!/usr/bin/env bash
# Issue 26's GPU runs on the lent H200 (benchmarks/RESULTS.md): the docs' Python blocks
# that replay and tune (tests/core/test_docs_code.py, after recording the app), kir record
# and trace with a driver, inspect --sass against the toolkit's cuobjdump. Carried as for
# gpu_issue25.sh (build/test-fixtures, .whl, .debs). Calls: `bash benchmarks/gpu_issue26.sh tests`.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?tests}
. "$(dirname "$0")/gpu_setup.sh"
if [ ! -e /tmp/kir-gpu-setup-done ]; then
  gpu_setup >"$OUT/setup.log" 2>&1 && touch /tmp/kir-gpu-setup-done
  tail -3 "$OUT/setup.log"
fi
if [ "$part" = tests ]; then
  PATH=$PATH:/usr/local/cuda/bin MARK="not slow" PYTHONPATH=$PYTHONPATH PYTEST_ARGS="-n 8 --dist loadfile -rs" \
    LIMIT=${TESTS_LIMIT:-480} tests issue26 tests/core/test_docs_code.py tests/cli/test_cli_app_args.py \
    tests/cli/test_inspect_sass.py tests/cli/test_cli_words.py tests/cli/test_cli_multi.py tests/core/test_public_api.py \
    tests/hook/test_hook_early.py tests/record/test_record_reader.py ${EXTRA_TESTS:-}
  grep -E "FAILED|ERROR|XPASS|SKIPPED" "$OUT/issue26.log" | head -40
fi
exit 0
