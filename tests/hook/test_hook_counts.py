"""The layer's and the JIT client's per-launch counters are per-thread blocks
summed when read (libkir/hook/include/kir_hook_internal/thread_counters.hpp, issue 15: no locked
instruction per launch). Without a GPU: the stub runtime and driver, an app that
launches from waves of threads — the second wave reuses the blocks of the first,
whose threads exited — and from its main thread, then reads kir_hook_get_stats.
Every launch must be counted exactly once, with no client, with a listening
client and with the JIT client claiming every launch (its own counts too)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import jit_rig
import kir
import stub_cuda as override
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)
from kir import jit
from kir.cache import Cache
from kir.hashing import jit_key, kernel_hashes
from kir.jit.client import client_environment

# The stub runtimes are found whatever LD_LIBRARY_PATH says (a GPU machine names the
# real driver's directory there): the programs carry DT_RPATH (issue 21, item 16).
pytestmark = pytest.mark.usefixtures("hostile_library_path")

JIT_CLIENT = Path(kir.__file__).parent / "lib" / "libkir_jit.so"
THREADS, PER_THREAD, MAIN = 8, 1000, 500
TOTAL = 2 * THREADS * PER_THREAD + MAIN

APP = source("hook/hook_counts_app.c")

LISTENER = source("hook/hook_counts_listener.c")


@pytest.fixture(scope="module")
def counts_rig(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("counts")
    override.build_stub_libraries(d, jit_rig.DRIVER, quiet=True, optimize=True)
    (d / "app.c").write_text(APP.replace("AXPY", override.AXPY))
    (d / "listener.c").write_text(LISTENER)

    def cc(*args):
        subprocess.run(["gcc", "-O2", "-Wall", *map(str, args)], check=True, cwd=d)

    cc(f"-I{override.INCLUDE}", f"-DTHREADS={THREADS}", f"-DPER_THREAD={PER_THREAD}", f"-DMAIN={MAIN}", "app.c",
       f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", "-lpthread", *rpath(d), "-o", "app")
    cc("-shared", "-fPIC", f"-I{override.INCLUDE}", "listener.c", "-o", "liblistener.so")
    return d, built["kernels.fatbin"], built["kernels_sm90.cubin"]


def counts(rig, env_extra) -> dict[str, int]:
    d, fatbin, _ = rig
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d), **env_extra}
    proc = subprocess.run([d / "app", fatbin], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("counts "))
    return {k: int(v) for k, v in (item.split("=") for item in line.split()[1:])}


def test_every_launch_is_counted_once_without_a_client(counts_rig):
    assert counts(counts_rig, {}) == {"launches": TOTAL, "substituted": 0, "handled": 0}


def test_every_launch_is_counted_once_with_a_listening_client(counts_rig):
    d = counts_rig[0]
    assert counts(counts_rig, {"KIR_HOOK_CLIENTS": str(d / "liblistener.so")}) == {
        "launches": TOTAL, "substituted": 0, "handled": 0}


def test_every_claimed_launch_is_counted_by_the_layer_and_the_jit_client(counts_rig, tmp_path):
    d, fatbin, cubin = counts_rig
    hashes, _ = kernel_hashes(kir.open(fatbin))
    static = next(h.static.hex for h in hashes
                  if h.kernel == override.AXPY and h.target == "sm_90" and h.code_kind == "cubin")
    cache = tmp_path / "cache"
    Cache(cache).store(jit_key(static, "sm_90", [], shared_bytes=16, config=jit.Options().config()),
                       Path(cubin).read_bytes(), "cubin", "sm_90")
    stats = tmp_path / "jit.json"
    env = {"KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90",
           **client_environment(cache, all_kernels=True, stats=stats)}
    assert counts(counts_rig, env) == {"launches": TOTAL, "substituted": TOTAL, "handled": 0}
    jit_stats = json.loads(stats.read_text())
    assert (jit_stats["launches"], jit_stats["hits"], jit_stats["misses"]) == (TOTAL, TOTAL, 0)
