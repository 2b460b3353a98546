"""Per-buffer tolerances set by the app at record time (issue 24 §2), without a
GPU: rec_faults (tests/fixtures/record_apps/faults.c, `annotate` mode) calls
kir_record_annotate (kir/record.h) on its output buffer y and runs one axpy
launch over the host-memory stub driver under the real hook layer and recorder.
The record carries the annotation with y's region (format 3, `tolerance`), and
verification uses it by default: y's recorded epilogue moved within the
annotated ULPs is verified, beyond them a mismatch, and a tolerance given by the
command line (here: bitwise, Tolerance()) overrides it."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from faults_rig import kir_record, stub_environment, summary_line
from kir.record import Recording
from kir.replay import Tolerance, compare, tolerance_for
from kir.replay.comparison import annotated


@pytest.fixture(scope="module")
def faults(built):
    return built["rec_faults"], built["kernels_sm90.cubin"]


def record_of(faults, built, out, kind: str, threshold: str):
    app, cubin = faults
    result = kir_record(app, cubin, out, "annotate", kind, threshold, env=stub_environment(built))
    assert result.returncode == 0, result.stderr[-3000:]
    # y annotated (0: KIR_ANNOTATE_OK); the host array is in no device allocation (2)
    assert "annotate: y 0, host 2\n" in result.stdout
    assert summary_line(result.stderr) == f"kir-record: recorded 1 of 1 launches in {out}"
    (record,) = Recording(out).records()
    return record


def y_region(record):
    y_at = struct.unpack("<Q", record.launch.args[2])[0]
    (region,) = [r for r in record.allocations if r.address == y_at]
    return region


def test_without_kir_the_call_is_a_no_op(faults, built):
    app, cubin = faults
    bare = subprocess.run([app, cubin, "annotate", "ulp", "4"], capture_output=True, text=True,
                          env=stub_environment(built), timeout=60)
    assert bare.returncode == 0, bare.stderr
    assert "annotate: y 0, host 0\n" in bare.stdout  # the weak symbol is NULL: nothing called


def test_the_annotation_is_stored_with_its_region_and_verifies_by_default(faults, built, tmp_path):
    record = record_of(faults, built, tmp_path / "rec", "ulp", "4")
    assert record.version == 3
    y = y_region(record)
    assert y.tolerance == {"dtype": "float32", "kind": "ulp", "threshold": 4.0, "norm": "linf", "tag": "y"}
    assert [r.tolerance for r in record.allocations if r is not y] == [None]  # x: not annotated
    assert annotated(y) == Tolerance(dtype="float32", ulp=4)
    expected = record.epilogue(y)
    values = np.frombuffer(expected, np.float32)
    assert values[7] == 3 * 7  # y = 1 * x + 2x
    bits = values.view(np.uint32).copy()
    bits[1:] += 3  # every nonzero element 3 ulp up (y[0] = 0 stays)
    within = bits.tobytes()
    bits[100] += 2  # one 5 ulp up
    beyond = bits.tobytes()
    assert compare(y, within, expected, tolerance_for(y, None)) is None  # the annotation: verified
    m = compare(y, beyond, expected, tolerance_for(y, None))
    assert m is not None and m.max_ulp == 5 and m.ulp_limit == 4
    # the command line's tolerance overrides the annotation: bitwise now
    assert compare(y, within, expected, tolerance_for(y, Tolerance())) is not None
    assert compare(y, beyond, expected, tolerance_for(y, Tolerance(ulp=5))) is None


def test_an_absolute_annotation(faults, built, tmp_path):
    record = record_of(faults, built, tmp_path / "rec", "abs", "0.5")
    y = y_region(record)
    assert (y.tolerance["kind"], y.tolerance["threshold"]) == ("abs", 0.5)
    expected = record.epilogue(y)
    values = np.frombuffer(expected, np.float32).copy()
    values[5] += 0.25
    assert compare(y, values.tobytes(), expected, tolerance_for(y, None)) is None
    values[5] += 0.5
    assert compare(y, values.tobytes(), expected, tolerance_for(y, None)).max_abs == pytest.approx(0.75)
