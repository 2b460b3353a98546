"""OpenMP target regions at run time, without a GPU (issue 27, item 3): an app built by
clang-22 (tests/fixtures/openmp/omp_saxpy.c) or flang-22 (omp_saxpy.f90), linked with
kir's minimal device runtime (tests/fixtures/openmp/kir_ompdevice.c), runs through apt's
real libomptarget.so.22.1, whose CUDA plugin dlopen()s "libcuda.so" and finds
tests/fixtures/record_stub_driver.c there (a host-memory driver that runs these regions
from their launch arguments). OMP_TARGET_OFFLOAD=MANDATORY: a region that fell back to
the host would end the app, and only the stub's launch computes y. Under kir's hook (the
plugin looks the driver up by handle: docs/architecture.md, "Libraries without a
runtime"), `kir trace` sees the image the plugin loads and the region's launch with its
arguments, and `kir record` records the region: its launch and x and y before and after.
The same kind of app ran on an H200 through the real driver (no test here yet)."""
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
from kir.record import Recording

N = 256
SAXPY = {  # the app's compiler, source and the region's launch arguments (word indices)
    # clang-22: (dyn_ptr, n, y, a, x); flang-22: (dyn_ptr, x, y, i, n, a, extent of y, extent of x)
    "c": {"compiler": "clang-22", "source": "omp_saxpy.c", "x": 4, "y": 2, "a": 3, "args": 5, "region": "_saxpy_l"},
    "fortran": {"compiler": "flang-22", "source": "omp_saxpy.f90", "x": 1, "y": 2, "a": 5, "args": 8,
                "region": "_saxpy__l"},
}
OFFLOAD = ["-O2", "-fopenmp", "--offload-arch=sm_90", "-nogpulib"]


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> Path:
    """A folder with the stub driver (libcuda.so.1, and libcuda.so, the name the plugin
    dlopen()s) and kir's device runtime, built by clang-22."""
    if not shutil.which("clang-22"):
        pytest.skip("clang-22 not installed")
    found = _run(["clang-22", "-print-file-name=libomptarget.so"]).stdout.strip()
    if not os.path.isabs(found):
        pytest.skip("libomptarget (liboffload-22-dev) not installed")
    d = tmp_path_factory.mktemp("openmp")
    for command in (["gcc", "-Wall", "-Wextra", "-Werror", "-O1", "-shared", "-fPIC",
                     FIXTURES / "record_stub_driver.c", "-Wl,-soname,libcuda.so.1", "-o", d / "libcuda.so.1"],
                    ["clang-22", *OFFLOAD, "-c", FIXTURES / "openmp" / "kir_ompdevice.c", "-o", d / "device.o"]):
        built = _run(command)
        assert built.returncode == 0, built.stderr
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    return d


@pytest.fixture(scope="module", params=sorted(SAXPY))
def app(request, rig) -> tuple[Path, dict]:
    """The saxpy app in C or Fortran, linked with the device runtime."""
    spec = SAXPY[request.param]
    if not shutil.which(spec["compiler"]):
        pytest.skip(f"{spec['compiler']} not installed")
    out = rig / f"saxpy_{request.param}"
    built = _run([spec["compiler"], *OFFLOAD, FIXTURES / "openmp" / spec["source"], rig / "device.o", "-o", out])
    assert built.returncode == 0, built.stderr
    return out, spec


def environment(rig: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(rig), "OMP_TARGET_OFFLOAD": "MANDATORY", **extra}


def kir(*args, env) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "kir", *args], env=env)


EXPECTED = "1.0 511.0\n"  # y[0] = 2 * 0 + 1, y[255] = 2 * 255 + 1


def test_libomptarget_runs_the_region_on_the_stub_driver(rig, app, tmp_path):
    """libomptarget's CUDA plugin initialises the device, loads the image with
    cuModuleLoadDataEx, finds the region's kernel, copies x and y in, launches, copies
    y out: the app prints what the stub's launch computed. Without the driver the
    mandatory offload fails, so the answer came from the launch."""
    path, spec = app
    calls = tmp_path / "calls"
    result = _run([path], env=environment(rig, STUB_CALLS=str(calls)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == EXPECTED
    sequence = calls.read_text().splitlines()
    kernel = next(c.split()[1] for c in sequence if c.startswith("cuModuleGetFunction "))
    assert kernel.startswith("__omp_offloading_") and spec["region"] in kernel
    order = ["cuInit", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain", "cuModuleLoadDataEx",
             f"cuModuleGetFunction {kernel}", "cuFuncGetParamInfo", "cuMemAlloc_v2", "cuMemcpyHtoDAsync_v2",
             "cuLaunchKernel", "cuMemcpyDtoHAsync_v2", "cuModuleUnload", "cuDevicePrimaryCtxRelease_v2"]
    assert all(step in sequence for step in order), sequence
    assert [sequence.index(step) for step in order] == sorted(sequence.index(step) for step in order), sequence
    assert sequence.count("cuLaunchKernel") == 1

    bare = _run([path], env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path), "OMP_TARGET_OFFLOAD": "MANDATORY"})
    if not any(Path(p, "libcuda.so").exists() for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        assert bare.returncode != 0 and "offloading is mandatory" in bare.stderr, bare.stdout


def trace_events(rig: Path, path: Path) -> list[dict]:
    traced = kir("trace", "--json", "--", path, env=environment(rig))
    assert traced.returncode == 0, traced.stderr
    assert EXPECTED in traced.stdout
    return [json.loads(line) for line in traced.stdout.splitlines() if line.startswith("{")]


def test_kir_trace_shows_the_region_loaded_and_launched(rig, app):
    """The hook sees the image the plugin loads (cuModuleLoadDataEx) and registers the
    region's kernel from it, with its parameters; then the region's launch through
    cuLaunchKernel, its arguments read from the plugin's argument buffer: the dyn_ptr,
    then the captures (n or the extents 256, a = 2.0 as 0x40000000, x and y where the
    plugin put them)."""
    path, spec = app
    events = trace_events(rig, path)
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
    threads = launch["grid"][0] * launch["block"][0]
    assert threads > 0 and launch["grid"][1:] == launch["block"][1:] == [1, 1]


def test_kir_record_records_the_region(rig, app, tmp_path):
    """`kir record` writes one record of the region: the launch the trace shows (kernel,
    grid, block, arguments but for x's and y's addresses, which the recorder places),
    and x and y before and after it as the app computed them."""
    path, spec = app
    launch = next(e for e in trace_events(rig, path) if e["event"] == "launch")
    out = tmp_path / "rec"
    recorded = kir("record", "-o", out, "--", path, env=environment(rig))
    assert recorded.returncode == 0, recorded.stderr
    assert EXPECTED in recorded.stdout
    records = list(Recording(out).records())
    assert len(records) == 1
    record = records[0]
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
