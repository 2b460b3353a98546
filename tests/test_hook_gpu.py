"""The hook layer on a real GPU (skipped, visibly, without one): the same app runs
for real under the hook with output identical to a bare run, launches succeed,
and what the hook saw matches the program."""
from __future__ import annotations

import json
import subprocess

import pytest

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
    assert app == bare.stdout.splitlines() and "launch 0" in bare.stdout
    events = [json.loads(l) for l in traced.stdout.splitlines() if l.startswith("{")]
    launches = [e for e in events if e["event"] == "launch"]
    assert len(launches) == 2 + 2 * 100 and all(l["result"] == 0 for l in launches)
    allocs = [e for e in events if e["event"] == "alloc"]
    frees = [e for e in events if e["event"] == "free"]
    assert len(allocs) == len(frees) == 1 + 2 * 100
    assert allocs[0]["size"] == 1024 and allocs[0]["kind"] == "device"
