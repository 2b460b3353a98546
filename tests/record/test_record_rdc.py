"""Relocatable device code (nvcc -rdc=true) recorded and replayed on a real GPU
(skipped, visibly, without one).

rec_rdc (tests/fixtures/record_apps/rdc_main.cu + rdc_lib.cu, device-linked by
nvcc, shared runtime): `rdc_transform` calls `rdc_mix`, a __device__ function of
the other unit; `rdc_scale` is the other unit's own kernel. The launched image is
the device-linked cubin, which holds no PTX; each record also keeps the PTX of
both relocatable units (`kernel.ptx_units`, in link order), so `kir replay --code
ptx` JIT-compiles and links them (the driver linker), as nvcc's device link did.
Both replays must be bit-exact.
"""
from __future__ import annotations

import json

import pytest

from record_gpu_rig import app_path, assert_replays, binary_kernels, record
from running import run_kir

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")
pytest.importorskip("msgpack", reason="msgpack not installed (the record reader needs it)")

TRANSFORM = "_Z13rdc_transformPKfPfi"
SCALE = "_Z9rdc_scalePfif"


@pytest.fixture(scope="module")
def rdc(gpu, built, tmp_path_factory):
    return record(tmp_path_factory, app_path(built, "rec_rdc"))


def test_rdc_app_records_both_kernels_with_every_units_ptx(rdc):
    assert rdc.kernels() == {TRANSFORM, SCALE} and rdc.kernels() <= binary_kernels(rdc.app)
    assert "calls=65536" in rdc.bare
    for r in rdc.records:
        kernel = rdc.meta[r["file"]]["kernel"]
        assert kernel["image"]["kind"] == "cubin" and kernel["image"]["arch"] == "sm_90"
        assert kernel["ptx"] is None  # the device-linked fatbin holds no PTX
        units = kernel["ptx_units"]
        assert len(units) == 2 and all(u["kind"] == "ptx" and u["arch"] == "sm_90" for u in units)


def test_rdc_kernels_replay_bit_exact_from_cubin_and_from_linked_ptx(rdc):
    for r in rdc.records:
        assert_replays(rdc, r, codes=("cubin", "ptx"))


def test_rdc_plan_says_it_links_the_units(rdc):
    r = rdc.of(TRANSFORM)[0]
    result = run_kir("replay", rdc.path(r), "--plan", "--code", "ptx", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["code"]["kind"] == "ptx" and plan["code"]["units"] == 2
