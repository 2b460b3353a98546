"""The IR of an OpenMP region given to its record (kir.omp.attach_region_ir, issue 27
item 3), offline: records of the region kernels of real clang-22 and flang-22 programs
(their cubins, as libomptarget loads them), given the IR of another build of the same
source — other file ids in every kernel name — matched by region identity and stored
with the kernel named as launched."""
from __future__ import annotations

import pytest

import kir
import openmp_apps
from kir import _core
from kir.ir import read_module
from kir.omp import attach_region_ir, region_key
from kir.record import Record

pytest.importorskip("llvmlite")


def region_record(directory, app) -> Record:
    """A record of `app`'s one region kernel, from its cubin (as the recorder writes one)."""
    [image] = kir.open(str(app)).images
    [kernel] = image.kernels
    data = image.read()
    b = _core.RecordBuilder(str(directory), 4096)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(kernel.name, kernel.name, _core.static_hash(kernel.name, "cubin", [data]),
                 [p.offset for p in kernel.params], [p.size for p in kernel.params])
    b.set_image("cubin", "sm_90", data)
    b.set_launch("cuLaunchKernel", _core.Hash128.from_hex("0" * 32), (8, 1, 1), (32, 1, 1), 0, 0,
                 [bytes(p.size) for p in kernel.params], 0)
    return Record.load(b.write())


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    return openmp_apps.built_apps(tmp_path_factory.mktemp("openmp"))


@pytest.mark.parametrize("app,ir", [("c_app", "c_ir_app"), ("fortran_app", "fortran_ir")])
def test_the_ir_of_another_build_is_found_by_region_identity(apps, app, ir, tmp_path):
    record = region_record(tmp_path / "rec", apps[app])
    [source] = [f.name for m in kir.ir.ir_modules(kir.open(str(apps[ir]))) for f in m.kernels]
    assert source != record.kernel.name and region_key(source) == region_key(record.kernel.name)  # another build
    attached, missing = attach_region_ir(tmp_path / "rec", [apps[ir]])
    assert missing == [] and [path for path, _ in attached] == [record.path]
    stored = Record.load(record.path)
    module = read_module(stored.chunk(stored.kernel.ir.chunk))
    assert not module.error and [f.name for f in module.kernels] == [record.kernel.name]  # named as launched
    assert stored.kernel.static_hash == record.kernel.static_hash and stored.launch == record.launch
    assert attach_region_ir(tmp_path / "rec", [apps[ir]]) == ([], [])  # it has IR now: left alone


def test_a_region_no_path_defines_is_reported_and_its_record_left_alone(apps, tmp_path):
    record = region_record(tmp_path / "rec", apps["c_app"])
    before = record.path.read_bytes()
    attached, missing = attach_region_ir(tmp_path / "rec", [apps["fortran_ir"]])  # the other program's IR
    assert attached == [] and missing == [record.kernel.name]
    assert record.path.read_bytes() == before


def test_kir_record_refuses_an_ir_path_that_is_not_there(kir_cli, tmp_path):
    result = kir_cli("record", "-o", tmp_path / "rec", "--ir", tmp_path / "nothing.bc", "--", "true")
    assert result.returncode == 2 and f"--ir {tmp_path / 'nothing.bc'}: no such file" in result.stderr
    assert not (tmp_path / "rec").exists()
