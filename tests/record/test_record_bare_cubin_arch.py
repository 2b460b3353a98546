"""A cubin loaded bare through the driver API (cuModuleLoadData: NVRTC's output, as
PyTorch's jiterator loads it; CuPy) carries its architecture only in its ELF header
(e_flags). The recorder writes it into the record, and the planner reads it from the
cubin for records written without it, so `kir replay` does not refuse them as "for ,"
(issue 24 §5). Without a GPU: rec_faults (tests/fixtures/record_apps/faults.c), a
driver-API app loading the nvcc-built kernels_sm90.cubin, recorded over the
host-memory stub driver (tests/fixtures/record_stub_driver.c)."""
from __future__ import annotations

import json
import subprocess
import sys

from faults_rig import kir_record, stub_environment, summary_line
from kir import _core
from kir.record import Recording
from record_builders import axpy_record


def kir(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_recorder_reads_a_bare_cubins_arch(built, tmp_path):
    app, cubin = built["rec_faults"], built["kernels_sm90.cubin"]
    assert _core.cubin_arch(cubin.read_bytes()) == "sm_90"
    result = kir_record(app, cubin, tmp_path / "rec", "guard", "after", "end", env=stub_environment(built))
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary_line(result.stderr).startswith("kir-record: recorded 2 of 2 launches")
    records = Recording(tmp_path / "rec").records()
    assert len(records) == 2
    for record in records:
        assert (record.kernel.image.kind, record.kernel.image.arch) == ("cubin", "sm_90")
        plan = kir("replay", record.path, "--plan", "--device-arch", "sm_90", "--json")
        assert plan.returncode == 0, plan.stderr
        assert json.loads(plan.stdout)["code"]["kind"] == "cubin"


def test_the_planner_reads_the_arch_of_a_record_written_without_it(built, tmp_path):
    record, _, _ = axpy_record(tmp_path / "rec", built["kernels_sm90.cubin"], image_arch="")
    assert record.kernel.image.arch == ""
    plan = kir("replay", record.path, "--plan", "--device-arch", "sm_90", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["code"]["kind"] == "cubin"
    other = kir("replay", record.path, "--plan", "--device-arch", "sm_80", "--code", "cubin")
    assert other.returncode == 2
    assert "the recorded cubin is for sm_90, the device is sm_80" in other.stderr


def test_an_image_that_is_not_a_cubin(tmp_path):
    for data in (b"", b"\x7fELF" + bytes(60), b"not an elf at all" * 4):
        try:
            _core.cubin_arch(data)
        except ValueError as error:
            assert "not a cubin" in str(error)
        else:
            raise AssertionError(f"{data[:8]!r}: no error")
