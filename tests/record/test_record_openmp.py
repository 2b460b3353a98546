"""OpenMP target regions on a GPU (issue 27, items 3 and 5; skipped, visibly, without one):
the saxpy apps of tests/fixtures/openmp (clang-22 C, flang-22 Fortran, with kir's device
runtime kir_ompdevice.c) run through libomptarget.so.22.1's CUDA plugin on the real
driver; `kir trace` sees the region's launch, `kir record` records it as on the stub
(tests/record/test_record_openmp_cpu.py) and `kir replay` verifies it on the device.
Needs clang-22, flang-22 and liboffload-22-dev on the GPU machine (skips without)."""
from __future__ import annotations

from pathlib import Path

import pytest

from openmp_rig import (
    EXPECTED,
    SAXPY,
    build_app,
    build_rig,
    check_record,
    check_trace,
    environment,
    record_region,
    replay,
    run,
    trace_events,
)


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> Path:
    return build_rig(tmp_path_factory.mktemp("openmp"), stub=False)


@pytest.fixture(scope="module", params=sorted(SAXPY))
def app(request, rig) -> tuple[Path, dict]:
    return build_app(rig, request.param)


def test_the_region_is_traced_recorded_and_replayed_on_the_gpu(gpu, app, tmp_path):
    path, spec = app
    env = environment(None)
    result = run([path], env=env)
    assert result.returncode == 0 and result.stdout == EXPECTED, result.stderr
    launch = check_trace(trace_events(path, env), spec)
    record = record_region(path, tmp_path / "rec", env)
    check_record(record, launch, spec, path)
    replayed, verdict = replay(record, env)
    assert replayed.returncode == 0, replayed.stderr
    assert (verdict["code"], verdict["hashes_match"], verdict["verified"]) == ("cubin", True, True), verdict
