# Sourced by benchmarks/gpu_issue*.sh on the lent H200: the carried wheels (.whl) into
# /tmp/site, the carried -dev packages (.debs) unpacked under /tmp/deps, and kir built from
# this checkout and installed. The -dev packages' libraries are found at link time
# (LIBRARY_PATH) and the shared ones at run time from the system: no LD_LIBRARY_PATH, which
# would outrank the tests' stub runtimes found through RUNPATH (issue 21, item 16).
export PYTHONPATH=/tmp/site CMAKE_PREFIX_PATH=/tmp/deps/usr CPATH=/tmp/deps/usr/include \
  LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
gpu_setup() {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  for d in .debs/*.deb; do dpkg -x "$d" /tmp/deps; done
  # The -dev packages' libzstd.so/liblz4.so point at runtimes not carried: the system's.
  for l in zstd lz4; do ln -sf "$(ls /usr/lib/x86_64-linux-gnu/lib$l.so.1)" /tmp/deps/usr/lib/x86_64-linux-gnu/lib$l.so; done
  rm -rf build/cp*
  python3 -m pip install --no-build-isolation --no-deps -q . 2>&1 | tail -3
  python3 -c "import kir; print('kir', kir.__version__, 'ABI', kir.c_abi_version, 'hook API', kir.hook_api_version)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}
# One named group of tests (`tests NAME FILES...`), its log under $OUT: LIMIT seconds (560),
# MARK (a -m expression; none), PYTEST_ARGS (more options).
tests() {  # one named group of tests, its log under $OUT
  local name=$1; shift
  timeout "${LIMIT:-560}" python3 -m pytest -p no:cacheprovider -q -rfEs --durations=10 -m "${MARK:-}" ${PYTEST_ARGS:-} "$@" \
    >"$OUT/$name.log" 2>&1
  echo "$name: exit $?; $(tail -1 "$OUT/$name.log")"
}
