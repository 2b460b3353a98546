"""kir.record.attach_ir: a record given its kernel's IR after the launch (an OpenMP
region's, which the hook never sees: kir.omp). The record reads back with the IR,
everything else unchanged, the header's checksum the C++ writer's."""
from __future__ import annotations

import subprocess

import pytest

from kir.errors import RecordError
from kir.record import RECORD_LAYOUT, Record, attach_ir, read_record_body
from replay_records import make_record
from running import require


def bitcode(tmp_path) -> bytes:
    require("clang-22")
    source = tmp_path / "k.c"
    source.write_text("void k(float *y) { y[0] = 1.0f; }\n")
    out = tmp_path / "k.bc"
    subprocess.run(["clang-22", "-c", "-emit-llvm", "-O1", source, "-o", out], check=True, capture_output=True)
    return out.read_bytes()


def test_attach_ir_keeps_the_record_and_adds_the_module(built, tmp_path):
    record = make_record(tmp_path / "rec", built["kernels_sm90.cubin"], "_Z4axpyfPKfPfi")
    assert record.kernel.ir is None
    before = read_record_body(record.path)
    module = bitcode(tmp_path)
    attach_ir(record.path, module)
    after = Record.load(record.path)
    assert after.kernel.ir is not None and after.chunk(after.kernel.ir.chunk) == module
    body = read_record_body(after.path)
    assert body["kernel"].pop("ir") is not None and before["kernel"].pop("ir") is None
    assert body == before  # nothing else changed
    assert after.prologue(0) == record.prologue(0) and after.epilogue(0) == record.epilogue(0)
    assert [p.name for p in after.path.parent.iterdir()] == [after.path.name]  # no temporary left


def test_a_damaged_record_is_refused_and_left_as_it_was(built, tmp_path):
    record = make_record(tmp_path / "rec", built["kernels_sm90.cubin"], "_Z4axpyfPKfPfi")
    data = bytearray(record.path.read_bytes())
    data[RECORD_LAYOUT.size + 3] ^= 0xFF
    record.path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match="checksum"):
        attach_ir(record.path, bitcode(tmp_path))
    assert record.path.read_bytes() == bytes(data)
