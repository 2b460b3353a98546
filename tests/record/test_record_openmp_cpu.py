"""OpenMP target regions at run time, without a GPU (issue 27, item 3): an app built by
clang-22 (tests/fixtures/openmp/omp_saxpy.c) or flang-22 (omp_saxpy.f90), linked with
kir's minimal device runtime (tests/fixtures/openmp/kir_ompdevice.c), runs through apt's
real libomptarget.so.22.1, whose CUDA plugin dlopen()s "libcuda.so" and finds
tests/fixtures/record_stub_driver.c there (a host-memory driver that runs these regions
from their launch arguments). OMP_TARGET_OFFLOAD=MANDATORY: a region that fell back to
the host would end the app, and only the stub's launch computes y. Under kir's hook (the
plugin looks the driver up by handle: docs/architecture.md, "Libraries without a
runtime"), `kir trace` sees the image the plugin loads and the region's launch with its
arguments, `kir record` records the region (its launch, x and y before and after), and
`kir replay` replays it on the stub. On a GPU: tests/record/test_record_openmp_gpu.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from kir.record import Recording
from openmp_rig import (
    EXPECTED,
    SAXPY,
    build_app,
    build_rig,
    check_record,
    check_trace,
    environment,
    kir,
    record_region,
    replay,
    run,
    trace_events,
)


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> Path:
    return build_rig(tmp_path_factory.mktemp("openmp"))


@pytest.fixture(scope="module", params=sorted(SAXPY))
def app(request, rig) -> tuple[Path, dict]:
    return build_app(rig, request.param)


def test_libomptarget_runs_the_region_on_the_stub_driver(rig, app, tmp_path):
    """libomptarget's CUDA plugin initialises the device, loads the image with
    cuModuleLoadDataEx, finds the region's kernel, copies x and y in, launches, copies
    y out: the app prints what the stub's launch computed. Without the driver the
    mandatory offload fails, so the answer came from the launch."""
    path, spec = app
    calls = tmp_path / "calls"
    result = run([path], env=environment(rig, STUB_CALLS=str(calls)))
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

    if not any(Path(p, "libcuda.so").exists() for p in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        bare = run([path], env=environment(tmp_path))  # no driver there
        assert bare.returncode != 0 and "offloading is mandatory" in bare.stderr, bare.stdout
    assert run([path], env=environment(rig, STUB_IDLE_LAUNCHES="1")).stdout == "1.0 1.0\n"  # y as it was


def test_kir_trace_shows_the_region_loaded_and_launched(rig, app):
    path, spec = app
    check_trace(trace_events(path, environment(rig)), spec)


def test_kir_record_records_the_region(rig, app, tmp_path):
    path, spec = app
    launch = check_trace(trace_events(path, environment(rig)), spec)
    check_record(record_region(path, tmp_path / "rec", environment(rig)), launch, spec, path)


def test_kir_replay_verifies_the_region_on_the_stub_driver(rig, app, tmp_path):
    """`kir replay` loads the recorded cubin, restores x and y, launches the region with
    its recorded arguments (kernelParams: the stub computes it again) and finds y as
    recorded; where the launch computes nothing (STUB_IDLE_LAUNCHES), y is not."""
    path, _ = app
    record = record_region(path, tmp_path / "rec", environment(rig))
    replayed, result = replay(record, environment(rig))
    assert replayed.returncode == 0, replayed.stderr
    assert (result["code"], result["hashes_match"], result["verified"]) == ("cubin", True, True), result
    idle, result = replay(record, environment(rig, STUB_IDLE_LAUNCHES="1"))
    assert idle.returncode != 0 and result["verified"] is False and result["mismatches"], (idle.stderr, result)


def test_kir_record_gives_the_region_the_ir_of_another_build(rig, tmp_path):
    """`kir record --ir`: the region's record gets the IR of the same source built in
    another directory with -fopenmp-target-jit (the linked device module, runtime included,
    in that executable's .llvm.offloading; other file ids in its kernel's name), found by
    region identity (kir.omp) and stored under the launched kernel's name."""
    pytest.importorskip("llvmlite")
    from kir.ir import read_module
    from kir.omp import region_key
    from openmp_apps import CUDA, runtime_object
    from openmp_rig import FIXTURES, OFFLOAD
    path, _ = build_app(rig, "c")
    other = tmp_path / "another" / "checkout"
    other.mkdir(parents=True)
    (other / "omp_saxpy.c").write_bytes((FIXTURES / "openmp" / "omp_saxpy.c").read_bytes())
    runtime = runtime_object(other, jit=True)
    built = run(["clang-22", *OFFLOAD, *CUDA, "-fopenmp-target-jit", "omp_saxpy.c", runtime.name, "-o", "saxpy_ir"],
                cwd=other)
    assert built.returncode == 0, built.stderr
    recorded = kir("record", "-o", tmp_path / "rec", "--ir", other / "saxpy_ir", "--", path, env=environment(rig))
    assert recorded.returncode == 0 and EXPECTED in recorded.stdout, recorded.stderr
    assert f"the region's IR from {other / 'saxpy_ir'}" in recorded.stderr
    [record] = Recording(tmp_path / "rec").records()
    module = read_module(record.chunk(record.kernel.ir.chunk))
    [kernel] = [f.name for f in module.kernels]
    assert kernel == record.kernel.name and region_key(kernel) is not None
    record.check()
