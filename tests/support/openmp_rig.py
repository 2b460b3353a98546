"""OpenMP target regions run through LLVM's libomptarget on the host-memory stub driver
(issue 27, item 3; tests/record/test_record_openmp_cpu.py): tests/fixtures/openmp's
omp_saxpy.c (clang-22) and omp_saxpy.f90 (flang-22), whose region captures n, so that the
stub (tests/fixtures/record_stub_driver.c) computes exactly what each launch asks, linked
with kir's device runtime (openmp_apps.runtime_object), and what `kir trace`, `kir
record` and `kir replay` make of their region."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from build import HERE as FIXTURES
from kir import open as kir_open
from kir.record import Record, Recording
from openmp_apps import CUDA, runtime_object

N = 256
EXPECTED = "1.0 511.0\n"  # y[0] = 2 * 0 + 1, y[255] = 2 * 255 + 1
SAXPY = {  # the app's compiler, source and the region's launch arguments (word indices)
    # clang-22: (dyn_ptr, n, y, a, x); flang-22: (dyn_ptr, x, y, i, n, a, extent of y, extent of x)
    "c": {"compiler": "clang-22", "source": "omp_saxpy.c", "x": 4, "y": 2, "a": 3, "args": 5, "region": "_saxpy_l"},
    "fortran": {"compiler": "flang-22", "source": "omp_saxpy.f90", "x": 1, "y": 2, "a": 5, "args": 8,
                "region": "_saxpy__l"},
}
OFFLOAD = ["-O2", "-fopenmp", "--offload-arch=sm_90", "-nogpulib"]  # as openmp_apps builds


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)


def build_rig(d: Path) -> Path:
    """kir's device runtime (openmp_apps.runtime_object) and the stub driver (libcuda.so.1,
    and libcuda.so: the name libomptarget's plugin dlopen()s), built into `d`; skips
    without clang-22 or libomptarget."""
    if not shutil.which("clang-22"):
        pytest.skip("clang-22 not installed")
    if not os.path.isabs(run(["clang-22", "-print-file-name=libomptarget.so"]).stdout.strip()):
        pytest.skip("libomptarget (liboffload-22-dev) not installed")
    runtime_object(d).rename(d / "device.o")
    built = run(["gcc", "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC", FIXTURES / "record_stub_driver.c",
                 "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1"])
    assert built.returncode == 0, built.stderr
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    return d


def build_app(d: Path, language: str) -> tuple[Path, dict]:
    """The saxpy app in `language` (c, fortran), linked with the device runtime in `d`."""
    spec = SAXPY[language]
    if not shutil.which(spec["compiler"]):
        pytest.skip(f"{spec['compiler']} not installed")
    out = d / f"saxpy_{language}"
    cuda = CUDA if spec["compiler"] == "clang-22" else []  # flang-22 takes no --cuda-path
    built = run([spec["compiler"], *OFFLOAD, *cuda, FIXTURES / "openmp" / spec["source"], d / "device.o", "-o", out])
    assert built.returncode == 0, built.stderr
    return out, spec


def environment(driver: Path, **extra: str) -> dict[str, str]:
    """Mandatory offload (a host fallback fails), on the driver in the folder `driver`."""
    return {**os.environ, "OMP_TARGET_OFFLOAD": "MANDATORY", "LD_LIBRARY_PATH": str(driver), **extra}


def kir(*args, env) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "kir", *args], env=env)


def trace_events(path: Path, env) -> list[dict]:
    traced = kir("trace", "--json", "--", path, env=env)
    assert traced.returncode == 0, traced.stderr
    assert EXPECTED in traced.stdout
    return [json.loads(line) for line in traced.stdout.splitlines() if line.startswith("{")]


def check_trace(events: list[dict], spec: dict) -> dict:
    """The region's kernel registered from the image the plugin loaded, with its
    parameters; one cuLaunchKernel of it, its arguments read from the plugin's buffer:
    the dyn_ptr, then the captures (n or the arrays' extents 256, a = 2.0 as
    0x40000000, x and y where the plugin put them). The launch event."""
    kernels = [e for e in events if e["event"] == "register-kernel"]
    assert len(kernels) == 1 and spec["region"] in kernels[0]["kernel"], kernels
    kernel = kernels[0]
    assert kernel["kernel"].startswith("__omp_offloading_") and kernel["params"] == spec["args"]
    launches = [e for e in events if e["event"] == "launch"]
    assert len(launches) == 1, launches
    launch = launches[0]
    assert (launch["api"], launch["kernel"], launch["result"]) == ("cuLaunchKernel", kernel["kernel"], 0)
    assert launch["static"] == kernel["static"]
    args = [int(a, 16) for a in launch["args"]]
    assert len(args) == spec["args"] and args[spec["a"]] & 0xFFFFFFFF == 0x40000000
    assert N in args  # n (C) or the arrays' extents (Fortran)
    allocations = {e["address"]: e["size"] for e in events if e["event"] == "alloc"}
    assert allocations.get(args[spec["x"]]) == allocations.get(args[spec["y"]]) == 4 * N, (args, allocations)
    assert launch["grid"][0] * launch["block"][0] > 0 and launch["grid"][1:] == launch["block"][1:] == [1, 1]
    return launch


def record_region(path: Path, out: Path, env) -> Record:
    recorded = kir("record", "-o", out, "--", path, env=env)
    assert recorded.returncode == 0, recorded.stderr
    assert EXPECTED in recorded.stdout
    records = list(Recording(out).records())
    assert len(records) == 1
    return records[0]


def check_record(record: Record, launch: dict, spec: dict, path: Path) -> None:
    """The record holds the traced launch (kernel, grid, block, the arguments but for x's
    and y's addresses, which the recorder places), the app's own image, and x and y
    before and after the launch as the app computed them."""
    record.check()
    assert record.kernel.name == launch["kernel"]
    assert (record.kernel.image.kind, record.kernel.image.arch) == ("cubin", "sm_90")
    # the image the plugin loaded: the app's own (its .llvm.offloading, as kir reads it)
    assert record.code("image") in [i.read() for i in kir_open(path).images if i.kind == "cubin"]
    assert (list(record.launch.grid), list(record.launch.block)) == (launch["grid"], launch["block"])
    words = [struct.unpack("<Q", a)[0] for a in record.launch.args]
    traced = [int(a, 16) for a in launch["args"]]
    pointers = {spec["x"], spec["y"]}
    assert [w for i, w in enumerate(words) if i not in pointers] == [w for i, w in enumerate(traced)
                                                                      if i not in pointers]
    regions = {r.address: r for r in record.allocations}
    x, y = regions[words[spec["x"]]], regions[words[spec["y"]]]
    xs = array("f", range(N)).tobytes()
    assert record.prologue(x) == xs and record.epilogue(x) == xs
    assert record.prologue(y) == array("f", [1.0] * N).tobytes()
    assert record.epilogue(y) == array("f", (2.0 * i + 1.0 for i in range(N))).tobytes()


def replay(record: Record, env) -> tuple[subprocess.CompletedProcess, dict]:
    replayed = kir("replay", record.path, "--json", env=env)
    return replayed, json.loads(replayed.stdout)
