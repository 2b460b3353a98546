#!/usr/bin/env bash
# The checked-in style and lint configs, checked (CONTRIBUTING.md, "Style and lint"):
#   clang-format-22 (.clang-format) on the C and C++ of libkir/, bindings/ and examples/;
#   ruff check (pyproject.toml [tool.ruff]) on the Python.
#   bash scripts/lint.sh           check; exit 1 on a finding, naming the file and line
#   bash scripts/lint.sh --fix     apply them: clang-format -i, ruff check --fix
#   bash scripts/lint.sh --tidy    also clang-tidy-22 (.clang-tidy) over a compile database in build/lint
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0 tidy=0
for arg in "$@"; do
  case "$arg" in
    --fix) fix=1 ;;
    --tidy) tidy=1 ;;
    *) echo "usage: bash scripts/lint.sh [--fix] [--tidy]" >&2; exit 2 ;;
  esac
done
bash scripts/install-system-deps.sh --lint
. scripts/venv.sh
# ruff at the version the test extra pins (a newer ruff may add findings).
ruff_pin=$(grep -o '"ruff==[^"]*"' pyproject.toml | tr -d '"')
python -m ruff --version 2>/dev/null | grep -q "${ruff_pin#ruff==}" || python -m pip install -q "$ruff_pin"

mapfile -t sources < <(git ls-files -- 'libkir/*.c' 'libkir/*.h' 'libkir/*.cpp' 'libkir/*.hpp' 'bindings/*.cpp' \
  'bindings/*.hpp' 'bindings/*.h' 'examples/*.c' 'examples/*.cpp' 'examples/*.h' 'examples/*.cu')
status=0
if [ "$fix" = 1 ]; then
  clang-format-22 -i "${sources[@]}"
  python -m ruff check --fix .
else
  clang-format-22 --dry-run -Werror "${sources[@]}" || status=1
  python -m ruff check . || status=1
fi
if [ "$tidy" = 1 ]; then
  cmake -S . -B build/lint -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DKIR_BUILD_PYTHON=OFF \
    -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22 >/dev/null
  mapfile -t units < <(python -c 'import json, sys
print("\n".join(e["file"] for e in json.load(open("build/lint/compile_commands.json")) if "/libkir/" in e["file"]))')
  clang-tidy-22 -p build/lint --quiet "${units[@]}" || status=1
fi
exit "$status"
