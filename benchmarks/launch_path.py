"""Where the hook layer's nanoseconds per launch go (issue 15), measured without a
GPU: a C app launches one kernel N times through `cudaLaunchKernel` of a stub
CUDA runtime and driver that return at once (tests/support/stub_cuda.py's stubs,
their printing compiled out), so the time per launch is the launch path's alone,
with nothing of the driver's or the GPU's. Each configuration adds one stage;
the differences between neighbours are the stages' costs:

  bare                         the stub runtime alone
  hook                         + the interposer and the layer, no client
  client: callbacks only       + one client's launch_begin/launch_completed
                                 (it skips the kernel, the identity and the device: launch_skips)
  client: + kernel lookup      + the registry lookup of the launched kernel
  client: + launch identity    + the launch identity (a hash over every argument's bytes)
  client: + device             + the launch's device, arch and context (hook API 7: one
                                 cuCtxGetCurrent, the rest remembered per thread)
  JIT client: miss             the reference JIT client (it skips the identity), its
                                 JIT key computed and looked up, not in the cache
  JIT client: hit              the same, the key cached: the launch is claimed and the
                                 cached cubin launched through the stub driver

Interleaved rounds (every configuration once per round), the median per
configuration. The fixture kernels (tests/fixtures) are built first.

    python benchmarks/launch_path.py [--rounds 7] [--launches 200000]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import kir
from kir import jit
from kir.cache import Cache
from kir.hashing import jit_key, kernel_hashes
from kir.jit.client import client_environment

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
import build as fixture_build  # noqa: E402
import jit_rig  # noqa: E402
import stub_cuda as override  # noqa: E402

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
JIT_CLIENT = Path(kir.__file__).parent / "lib" / "libkir_jit.so"
INCLUDE = Path(kir.__file__).parent / "include"

APP = override.APP_PRELUDE + r"""
#include <time.h>
int main(int argc, char** argv) {
  struct { int magic, version; const void* data; void* filename; } wrapper = {0x466243b1, 1, slurp(argv[1]), 0};
  void** h = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(h, &axpy_stub, (char*)"AXPY", "AXPY", -1, 0, 0, 0, 0, 0);
  long n = atol(argv[2]);
  float a = 2.5f; const float* x = 0; float* y = 0; int count = 64;
  void* args[] = {&a, &x, &y, &count};
  dim3 g = {4, 1, 1}, b = {32, 1, 1};
  for (int i = 0; i < 1000; ++i) cudaLaunchKernel(&axpy_stub, g, b, args, 16, (void*)0x5);  /* warm */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; ++i) cudaLaunchKernel(&axpy_stub, g, b, args, 16, (void*)0x5);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
  fputs("", stdout);
  dprintf(1, "ns_per_launch %.2f\n", ns / n);
  return 0;
}
"""

CLIENT = r"""
#include <stddef.h>
#include "kir/hooks.h"
static volatile unsigned long long seen;
static void begin(void* u, const kir_hook_launch* l) { (void)u; seen += l->grid.x; }
static void completed(void* u, const kir_hook_launch* l) { (void)u; seen += l->result; }
static kir_hook_client c;
const kir_hook_client* kir_hook_client_entry(void) {
  c.struct_size = sizeof c;
  c.api_version = KIR_HOOK_API_VERSION;
  c.launch_begin = begin;
  c.launch_completed = completed;
  c.launch_skips = SKIPS;
  return &c;
}
"""


def build(work: Path, fatbin: Path) -> None:
    def cc(*args):
        subprocess.run(["gcc", "-O2", "-w", *map(str, args)], check=True, cwd=work)

    # The stub's cuCtxGetCurrent asks getenv at each call (tests switch it): not here.
    override.build_stub_libraries(work, jit_rig.DRIVER.replace('getenv("STUB_NO_CONTEXT")', "0"),
                                  quiet=True, optimize=True)
    (work / "app.c").write_text(APP.replace("AXPY", override.AXPY))
    (work / "client.c").write_text(CLIENT)
    cc("app.c", f"-L{work}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", f"-Wl,-rpath,{work}", "-o", "app")
    for name, skips in (("callbacks", "KIR_HOOK_SKIP_KERNEL|KIR_HOOK_SKIP_DEVICE"),
                        ("kernel", "KIR_HOOK_SKIP_IDENTITY|KIR_HOOK_SKIP_DEVICE"), ("identity", "KIR_HOOK_SKIP_DEVICE"),
                        ("device", "0")):
        cc("-shared", "-fPIC", f"-I{INCLUDE}", f"-DSKIPS={skips}", "client.c", "-o", f"lib{name}.so")


def configurations(work: Path, fatbin: Path) -> list[tuple[str, dict]]:
    hashes, _ = kernel_hashes(kir.open(fatbin))
    static = next(h.static.hex for h in hashes
                  if h.kernel == override.AXPY and h.target == "sm_90" and h.code_kind == "cubin")
    hit, miss = work / "hit", work / "miss"
    cubin = fixture_build.build_all(HERE.parent / "build" / "test-fixtures")["kernels_sm90.cubin"]
    key = jit_key(static, "sm_90", [], shared_bytes=16, config=jit.Options().config())
    Cache(str(hit)).store(key, Path(cubin).read_bytes(), "cubin", "sm_90")
    base = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(work)}
    hook = {**base, "LD_PRELOAD": str(HOOK)}
    jit_env = {**hook, "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90"}
    return [
        ("bare", base),
        ("hook", hook),
        ("client: callbacks only", {**hook, "KIR_HOOK_CLIENTS": str(work / "libcallbacks.so")}),
        ("client: + kernel lookup", {**hook, "KIR_HOOK_CLIENTS": str(work / "libkernel.so")}),
        ("client: + launch identity", {**hook, "KIR_HOOK_CLIENTS": str(work / "libidentity.so")}),
        ("client: + device", {**hook, "KIR_HOOK_CLIENTS": str(work / "libdevice.so")}),
        ("JIT client: miss", {**jit_env, **client_environment(miss, all_kernels=True, recheck_ms=1000000)}),
        ("JIT client: hit", {**jit_env, **client_environment(hit, all_kernels=True)}),
    ]


def per_launch(work: Path, fatbin: Path, launches: int, env: dict) -> float:
    proc = subprocess.run([str(work / "app"), str(fatbin), str(launches)], capture_output=True, text=True,
                          env=env, timeout=600)
    found = re.search(r"ns_per_launch ([0-9.]+)", proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"the app failed ({proc.returncode}): {proc.stdout[-500:]} {proc.stderr[-1500:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--launches", type=int, default=200000)
    args = parser.parse_args()
    fatbin = fixture_build.build_all(HERE.parent / "build" / "test-fixtures")["kernels.fatbin"]
    work = Path(tempfile.mkdtemp(prefix="kir-launch-path-"))
    build(work, fatbin)
    configs = configurations(work, fatbin)
    times: dict[str, list[float]] = {name: [] for name, _ in configs}
    for _ in range(args.rounds):
        for name, env in configs:
            times[name].append(per_launch(work, fatbin, args.launches, env))
    print(f"{args.launches} launches x {args.rounds} rounds (interleaved), {os.cpu_count()} cores; "
          "ns per launch, median [min-max]; stage = the difference from the line above")
    print(f"{'configuration':<28} {'ns/launch':>10} {'range':>17} {'stage':>8}")
    previous = None
    for name, _ in configs:
        median = statistics.median(times[name])
        stage = "" if previous is None or name.startswith("JIT") else f"{median - previous:+8.1f}"
        if name.startswith("JIT"):
            stage = f"{median - statistics.median(times['hook']):+8.1f}"
        print(f"{name:<28} {median:>10.1f} {min(times[name]):>8.1f}-{max(times[name]):<8.1f} {stage:>8}")
        previous = median
    print("(JIT client lines: the difference from `hook`)")


if __name__ == "__main__":
    main()
