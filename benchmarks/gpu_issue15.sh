#!/usr/bin/env bash
# Issue 15's figures on the lent H200 machine (benchmarks/RESULTS.md), one part
# per call of the device tool (each under its 10-minute limit):
#   setup    the wheels and .debs this checkout carries, kir built and installed
#   launch   benchmarks/launch_path.py (stub runtime), hook_overhead.py, jit_client.py
#   inspect  inspect_profile.py on libtorch_cuda.so and libcublasLt (cuobjdump on the PATH)
#   inspect-2cores  the same on the toolkit's libcublasLt, on 2 cores (taskset)
#   record   record_replay.py --only a2 --threads 1,4,16, and --only c
#   tests-a / tests-b   the GPU tests, in two halves
set -uo pipefail
OUT=${OUT:-/tmp/kir-gpu}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site CMAKE_PREFIX_PATH=/tmp/deps/usr CPATH=/tmp/deps/usr/include \
  LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
part=${1:?setup, launch, inspect, inspect-2cores, record, tests-a or tests-b}
case "$part" in
  setup)
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    for d in .debs/*.deb; do dpkg -x "$d" /tmp/deps; done
    rm -rf build/cp*
    python3 -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -3
    python3 -c "import kir; print('kir', kir.__version__)"; nproc; nvidia-smi --query-gpu=name --format=csv,noheader ;;
  launch)
    python3 benchmarks/launch_path.py --rounds 9 --launches 200000
    python3 benchmarks/hook_overhead.py --pairs 9 --launches 100000
    python3 benchmarks/jit_client.py --pairs 9 --launches 100000 ;;
  inspect)
    python3 benchmarks/inspect_profile.py --threads 1,4,16 --repeat 3 ;;
  inspect-2cores)  # the CUDA toolkit's libcublasLt on 2 of the host's cores (the 2-core figure)
    lib=$(ls /usr/local/cuda*/lib64/libcublasLt.so.* 2>/dev/null | sort | tail -1)
    if [ -z "$lib" ]; then lib=$(find / -name 'libcublasLt.so.*' -size +100M 2>/dev/null | head -1); fi
    echo "library: ${lib:-none found}"
    [ -n "$lib" ] && taskset -c 0,1 python3 benchmarks/inspect_profile.py "$lib" --threads 1,2 --repeat 3 ;;
  record)
    python3 benchmarks/record_replay.py --only a2 --threads 1,4,16 --writeback 1,0
    python3 benchmarks/record_replay.py --only c ;;
  tests-a)
    python3 -m pytest -q -p no:cacheprovider -rs tests/hook/test_hook_gpu.py tests/jit/test_jit_gpu.py tests/record/test_record_gpu.py \
      tests/core/test_hash_agreement.py tests/core/test_gpu.py tests/record/test_record_rdc.py tests/hook/test_hook_rdc.py 2>&1 | tail -30 ;;
  tests-b)
    python3 -m pytest -q -p no:cacheprovider -rs tests/hook/test_hook_unload.py tests/replay/test_replay_all.py \
      tests/hook/test_hook_static.py tests/replay/test_replay_variants.py tests/tune/test_tune_gpu.py 2>&1 | tail -30 ;;
esac 2>&1 | tee "$OUT/$part.log"
