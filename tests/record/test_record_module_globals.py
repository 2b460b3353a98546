"""The globals of a module loaded through the driver API are recorded (issue 24 §5,
cuFFT). cuFFT loads its kernels with cuModuleLoadData and, at plan time, writes the
address of its twiddle table into each module's `lut_sp`/`lut_dp` (`.nv.global`, 8
bytes: every sm_90 image of libcufft.so.12 that holds a `regular_fft_factor` kernel
defines them; `kir inspect --scan --kernels --json` lists them). No
__cudaRegisterVar names them, so the recorder stored none, and a replay ran the
kernel with those pointers zero: CUDA_ERROR_ILLEGAL_ADDRESS. The hook now registers
the globals of the image it decoded with the module, found by cuModuleGetGlobal.

Without a GPU: rec_faults `globals` (tests/fixtures/record_apps/faults.c) writes
kernels.cu's `table` through cuModuleGetGlobal as cuFFT does, over the host-memory
stub driver; on the H200 the same app is recorded and replayed bit-exactly."""
from __future__ import annotations

import json
import struct
import subprocess
import sys

from faults_rig import kir_record, stub_environment, summary_line
from kir.record import Recording


def record_globals(built, out, env=None):
    app, cubin = built["rec_faults"], built["kernels_sm90.cubin"]
    result = kir_record(app, cubin, out, "globals", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "globals: table written" in result.stdout
    assert summary_line(result.stderr).startswith("kir-record: recorded 1 of 1 launches"), result.stderr[-2000:]
    (record,) = Recording(out).records()
    return record


def check_globals(record):
    globals_ = {g.name: g for g in record.globals}
    # kernels.cu's device variables, at their sizes in the cubin
    assert {n: g.size for n, g in globals_.items()} == {"counter": 4, "table": 256, "coefficients": 64}
    table = struct.unpack("64f", record.prologue(globals_["table"]))
    assert table == tuple(100.0 + i for i in range(64))  # as the app wrote it, not the image's initializer


def test_a_driver_loaded_modules_globals_are_recorded(built, tmp_path):
    check_globals(record_globals(built, tmp_path / "rec", env=stub_environment(built)))


def test_a_driver_loaded_modules_globals_replay_on_the_gpu(gpu, built, tmp_path):
    record = record_globals(built, tmp_path / "rec")
    check_globals(record)
    replayed = subprocess.run([sys.executable, "-m", "kir", "replay", str(record.path), "--json"],
                              capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    result = json.loads(replayed.stdout)
    assert result["verified"] is True, result
    assert not result.get("absent_globals"), result
