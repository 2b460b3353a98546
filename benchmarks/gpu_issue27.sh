#!/usr/bin/env bash
# Issue 27's GPU runs on the lent H200 (benchmarks/RESULTS.md): OpenMP target regions built
# here by clang-22 / flang-22 (linked with kir's minimal device runtime, tests/fixtures/omp/),
# run through LLVM 22's libomptarget (Debian's liboffload-22 and what it needs, carried as
# .debs under build/omp/debs and unpacked with dpkg -x) and kir's hook: trace, record, replay.
# Also issue 26's speed targets (benchmarks/inspect_targets.py on PyTorch's NVIDIA libraries).
# Carried: .whl, .debs, build/omp (debs and programs), build/omp-apps (`python
# tests/support/openmp_apps.py build/omp-apps`). Calls: `bash benchmarks/gpu_issue27.sh omp|tests|speed`.
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
part=${1:?omp|tests|speed}
. "$(dirname "$0")/gpu_setup.sh"
if [ ! -e /tmp/kir-gpu-setup-done ]; then
  gpu_setup >"$OUT/setup.log" 2>&1 && touch /tmp/kir-gpu-setup-done
  tail -3 "$OUT/setup.log"
fi
export PATH=$PATH:/usr/local/cuda/bin
if [ "$part" = speed ]; then
  # kir from a bare venv that sees only kir's own directory (a .pth line): the machine's
  # interpreter imports PyTorch's site hooks at every start (~70 ms), which no kir user pays.
  site=$(python3 -c 'import kir, os; print(os.path.dirname(os.path.dirname(kir.__file__)))')
  [ -x /tmp/cv/bin/python ] || python3 -m venv --without-pip /tmp/cv
  echo "$site" >"$(/tmp/cv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/kir-site.pth"
  python3 benchmarks/inspect_targets.py --repeat 3 --python /tmp/cv/bin/python 2>&1 | tee "$OUT/speed.log"
  libs=$(python3 -c 'import nvidia, pathlib; print(next(p for b in nvidia.__path__ for p in [pathlib.Path(b, "cu13/lib")] if p.is_dir()))')
  /tmp/cv/bin/python benchmarks/inspect_profile_targets.py "$libs" 2>&1 | grep -v "^$" | tee "$OUT/profile.log"
fi
D=/tmp/ompdeps
if [ "$part" != speed ]; then
  if [ ! -d $D ]; then for d in build/omp/debs/*.deb; do dpkg -x "$d" $D; done; fi
  mkdir -p $D/cuda
  [ -e $D/cuda/libcuda.so ] || ln -sf "$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')" $D/cuda/libcuda.so
  export OMPLIBS=$D/usr/lib/llvm-22/lib:$D/usr/lib/x86_64-linux-gnu:$D/usr/lib/llvm-19/lib:$D/cuda
fi
if [ "$part" = tests ]; then  # the programs prebuilt here: python tests/support/openmp_apps.py build/omp-apps
  export KIR_OPENMP_APPS=$PWD/build/omp-apps
  LD_LIBRARY_PATH=$OMPLIBS PYTEST_ARGS="-rs" LIMIT=${TESTS_LIMIT:-480} tests issue27 \
    tests/record/test_record_openmp_gpu.py tests/record/test_import_omp.py ${EXTRA_TESTS:-}
  grep -E "FAILED|ERROR|XPASS|SKIPPED|passed|failed" "$OUT/issue27.log" | head -40
fi
if [ "$part" = omp ]; then
  for app in ${APPS:-saxpy saxpy_jit fsaxpy}; do
    echo "== $app"
    LD_LIBRARY_PATH=$OMPLIBS LIBOMPTARGET_INFO=${INFO:-4} OMP_TARGET_OFFLOAD=MANDATORY timeout 120 build/omp/$app 2>&1 | tail -8
    echo "-- kir trace"
    LD_LIBRARY_PATH=$OMPLIBS OMP_TARGET_OFFLOAD=MANDATORY timeout 120 kir trace -- build/omp/$app 2>&1 | grep -v "register-global\|alloc\|free" | tail -12
    echo "-- kir record"
    rm -rf "$OUT/rec_$app"
    LD_LIBRARY_PATH=$OMPLIBS OMP_TARGET_OFFLOAD=MANDATORY timeout 120 kir record -o "$OUT/rec_$app" -- build/omp/$app 2>&1 | tail -4
    kir records "$OUT/rec_$app" 2>&1 | tail -4
    for code in ${CODES:-launched ptx ir}; do
      echo "-- kir replay --all --code $code"
      timeout 120 kir replay --all "$OUT/rec_$app" --code $code 2>&1 | tail -4
    done
  done
fi
exit 0
