"""The hook layer on a real GPU (skipped, visibly, without one): the same app runs
for real under the hook with output identical to a bare run, launches succeed,
and what the hook saw matches the program."""
from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.hashing import kernel_hashes

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")


def test_app_runs_for_real_under_the_hook(gpu, built, kir_cli):
    bare = subprocess.run([built["hook_app"], "2"], capture_output=True, text=True)
    traced = kir_cli("trace", "--json", "--", built["hook_app"], "2")
    assert traced.returncode == bare.returncode == 3
    app = [l for l in traced.stdout.splitlines() if not l.startswith("{")]
    # Only under the hook does the app find the Proteus ABI (a weak symbol) and use it.
    assert [l for l in app if not l.startswith("proteus ")] == bare.stdout.splitlines()
    assert "launch 0" in bare.stdout
    events = [json.loads(l) for l in traced.stdout.splitlines() if l.startswith("{")]
    launches = [e for e in events if e["event"] == "launch"]
    assert len(launches) == 3 + 2 * 100 and all(l["result"] == 0 for l in launches)
    assert "proteus launch 0" in traced.stdout  # the Proteus ABI, served by the hook
    allocs = [e for e in events if e["event"] == "alloc"]
    frees = [e for e in events if e["event"] == "free"]
    assert len(allocs) == len(frees) == 1 + 2 * 100
    assert allocs[0]["size"] == 1024 and allocs[0]["kind"] == "device"


def test_driver_api_app_under_the_hook(gpu, built, kir_cli):
    """Module load, lookup, allocation and launches through the driver API,
    including an entry point from cuGetProcAddress and a packed `extra` buffer."""
    cubin = built["kernels_sm90.cubin"]
    bare = subprocess.run([built["driver_app"], cubin], capture_output=True, text=True)
    assert bare.returncode == 0 and bare.stdout == "driver ok\n", bare.stdout
    traced = kir_cli("trace", "--json", "--", built["driver_app"], cubin)
    assert traced.returncode == 0, traced.stderr
    events = [json.loads(l) for l in traced.stdout.splitlines() if l.startswith("{")]
    assert [e["images"] for e in events if e["event"] == "register-fatbin"] == [1]
    kernels = {e["kernel"]: e for e in events if e["event"] == "register-kernel"}
    assert list(kernels) == ["_Z4axpyfPKfPfi"] and kernels["_Z4axpyfPKfPfi"]["params"] == 4
    hashes, _ = kernel_hashes(kir.open(cubin))
    static = {h.kernel: h.static.hex for h in hashes}
    assert kernels["_Z4axpyfPKfPfi"]["static"] == static["_Z4axpyfPKfPfi"]
    launches = [e for e in events if e["event"] == "launch"]
    assert [l["api"] for l in launches] == ["cuLaunchKernel"] * 2
    assert all(l["result"] == 0 and l["static"] == static["_Z4axpyfPKfPfi"] for l in launches)
    float_bits = lambda v: hex(struct.unpack("<I", struct.pack("<f", v))[0])
    params, extra = launches
    assert params["grid"] == [2, 1, 1] and params["args"][0] == float_bits(3.0) and params["args"][3] == hex(256)
    assert extra["grid"] == [1, 1, 1] and extra["args"][0] == float_bits(4.0) and extra["args"][3] == hex(128)
    assert params["args"][1] == params["args"][2] == extra["args"][1]  # the same device buffer
    allocs = [e for e in events if e["event"] == "alloc"]
    assert [(a["size"], a["kind"]) for a in allocs] == [(1024, "device")]
    assert [e["address"] for e in events if e["event"] == "free"] == [allocs[0]["address"]]
    assert hex(allocs[0]["address"]) == params["args"][1]


COMPLETION_CLIENT = source("hook/hook_gpu_completion_client.c")


def test_launch_completion_synchronized_or_stream_ordered(gpu, built, tmp_path):
    """Two clients: one asks for completion by synchronizing (on the app's thread,
    the stream idle), one stream-ordered (from the runtime's thread, with copied
    argument bytes)."""
    include = Path(kir.__file__).parent / "include"
    libraries = []
    for mode, report in ((1, "SYNC_REPORT"), (2, "ORDERED_REPORT")):
        library = tmp_path / f"libclient{mode}.so"
        source = tmp_path / "client.c"
        source.write_text(COMPLETION_CLIENT)
        subprocess.run(["gcc", "-shared", "-fPIC", f"-DMODE={mode}", f'-DREPORT="{report}"', "-I", include,
                        source, "-o", library, "-ldl", "-lpthread"], check=True)
        libraries.append(str(library))
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    env = {**os.environ, "LD_PRELOAD": str(hook), "KIR_HOOK_CLIENTS": ":".join(libraries),
           "SYNC_REPORT": str(tmp_path / "sync.txt"), "ORDERED_REPORT": str(tmp_path / "ordered.txt")}
    proc = subprocess.run([built["hook_app"]], capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    launches = 3  # two cudaLaunchKernel, one through the Proteus ABI
    begun, completed, done, other, args_ok = map(int, (tmp_path / "sync.txt").read_text().split())
    assert (begun, completed, done, other) == (launches, launches, launches, 0)
    begun, completed, done, other, args_ok = map(int, (tmp_path / "ordered.txt").read_text().split())
    assert (begun, completed, other) == (launches, launches, launches)
    assert args_ok == 2  # the two axpy launches, their copied `n` readable


def test_registry_uses_the_image_the_device_loads(gpu, built, kir_cli):
    """hook_app_sm100 holds sm_80, sm_90 and sm_100 cubins: on an sm_90 device the
    registry must describe (and hash) the sm_90 cubin, not the newest one."""
    app = built["hook_app_sm100"]
    err, device = driver.cuDeviceGet(0)
    err, major = driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    err, minor = driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    target = f"sm_{major}{minor}"
    hashes, _ = kernel_hashes(kir.open(app))
    by_target = {}
    for h in hashes:
        if h.code_kind == "cubin" and h.kernel == "_Z4axpyfPKfPfi":
            by_target[h.target] = h.static.hex
    assert target in by_target and "sm_100" in by_target and target != "sm_100"
    traced = kir_cli("trace", "--json", "--", app)
    events = [json.loads(l) for l in traced.stdout.splitlines() if l.startswith("{")]
    axpy = [e for e in events if e["event"] == "register-kernel" and e["kernel"] == "_Z4axpyfPKfPfi"]
    assert [e["static"] for e in axpy] == [by_target[target]]
    launches = [e for e in events if e["event"] == "launch" and e["kernel"] == "_Z4axpyfPKfPfi"]
    assert launches and all(l["result"] == 0 and l["static"] == by_target[target] for l in launches)


GLOBALS_QUERY = r"""
import ctypes, json, sys
import kir.hook
from cuda.bindings import driver
ctypes.CDLL(sys.argv[1])
out = []
for g in kir.hook.globals_():
    address = kir.hook.global_device_address(g.host_address)
    err, kind = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address)
    err2, size = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_RANGE_SIZE, address)
    out.append([g.name, g.size, address, int(kind) if err == 0 else -1, int(size) if err2 == 0 else -1,
                address == kir.hook.global_device_address(g.host_address)])
print(json.dumps(out))
"""


def test_python_resolves_global_device_addresses_inside_the_app(gpu, built):
    import sys
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    proc = subprocess.run([sys.executable, "-c", GLOBALS_QUERY, str(built["libkernels_shared_runtime.so"])],
                          capture_output=True, text=True, env={**os.environ, "LD_PRELOAD": str(hook)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout)
    assert seen
    device = int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE)
    for name, size, address, kind, range_size, cached in seen:
        assert address != 0 and kind == device and range_size >= size and cached, name


def test_a_code_substitute_with_more_than_48_kib_of_shared_memory_runs(gpu, tmp_path):
    """Issue 23: a CODE substitute launched with 64 KiB of dynamic shared memory failed
    (the layer never raised the loaded function's limit, and the driver refused the launch:
    the error reached the app). The client claims every launch with the kernel's own
    cubin; both launches must be substituted, succeed, and compute the right result."""
    import shutil

    from stub_cuda import CLIENT, INCLUDE
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    (tmp_path / "app.cu").write_text(source("hook/hook_gpu_big_shared.cu"))
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=sm_90", "-cudart", "shared", "app.cu", "-o", "app"],
                   check=True, cwd=tmp_path)
    (tmp_path / "client.c").write_text(CLIENT)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-I{INCLUDE}", '-DNAME="A"', "-DCLAIM=1", "-DV3=0", "-DREPORT=1",
                    "client.c", "-o", "libA.so"], check=True, cwd=tmp_path)
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    proc = subprocess.run([tmp_path / "app"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LD_PRELOAD": str(hook), "KIR_HOOK_CLIENTS": str(tmp_path / "libA.so"),
                               "KIR_HOOK_LOG": "1", "A_MODE": "code"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [l for l in proc.stdout.splitlines() if l.startswith("launch ")] == [
        "launch 0: cudaSuccess cudaSuccess wrong=0", "launch 1: cudaSuccess cudaSuccess wrong=0"]
    completed = [l for l in proc.stdout.splitlines() if l.startswith("A completed")]
    assert len(completed) == 2 and all("result=0 outcome=2" in l for l in completed), completed
    assert "A stats handled=0 substituted=2 loads=1 substitute_failures=0 failures=0" in proc.stdout
