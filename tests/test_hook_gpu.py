"""The hook layer on a real GPU (skipped, visibly, without one): the same app runs
for real under the hook with output identical to a bare run, launches succeed,
and what the hook saw matches the program."""
from __future__ import annotations

import json
import struct
import subprocess

import pytest

import kir
from kir.hashing import kernel_hashes

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")


@pytest.fixture(scope="module")
def gpu():
    try:
        err, = driver.cuInit(0)
    except Exception as error:
        pytest.skip(f"no GPU driver: {error}")
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        pytest.skip("no GPU present")


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
