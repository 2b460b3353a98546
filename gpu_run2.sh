#!/usr/bin/env bash
set -uo pipefail
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
for d in .debs/*.deb; do dpkg -x "$d" /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr CPATH=/tmp/deps/usr/include LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
rm -rf build/cp312-*
python3 -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -3
{
  timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_record_gpu.py tests/test_jit_gpu.py tests/test_gpu.py tests/test_hook_rdc.py 2>&1 | tail -15
  timeout 60 python3 benchmarks/jit_client.py --pairs 7 --launches 50000
} 2>&1 | tee "$OUT/gpu.log"
