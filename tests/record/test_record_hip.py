"""Recording HIP launches (issue 25 §2; docs/recording.md, docs/hip.md): `kir record` of
tests/fixtures/hip_record_app.c, a HIP app in C, through the recorder's HIP driver
(libkir/recorder/driver.cpp, HipDriver) on three runtimes:

1. the host-memory HIP device stub (tests/fixtures/hip_device_stub.c, tests/support/
   hip_device.py), launches by hipModuleLaunchKernel and (tests/fixtures/
   hip_record_kernel_app.hip, registered by clang's constructor) by hipLaunchKernel: the records hold every launch, the x and y snapshots at addresses of
   the recorder's VA range (hipMemAddressReserve/hipMemCreate/hipMemMap/hipMemSetAccess),
   the gfx942 code object the app loaded and its module global `launches`; each replays
   verified with kir.replay.Replayer(record, backend="hip") on the same stub (which maps
   the same addresses); an app that dies after two launches keeps their two records whole;
2. Debian's real libamdhip64.so (ROCm 5.2) without a GPU: the recorder says precisely that
   there is no HIP device, the app's calls and errors pass through, nothing crashes;
3. a real AMD GPU (amd_gpu: skips here): the same app recorded and replayed there.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

import kir
from hip_device import (  # noqa: F401 (hip_stub, amd_gpu: fixtures)
    ARCH,
    AXPY,
    DEVICE_ARCH,
    FIXTURES,
    amd_gpu,
    hip_stub,
    python_with_stub,
    stub_env,
)
from kir.record import Recording
from running import amd_gpu_count, real_hip_library

APP = FIXTURES / "hip_record_app.c"
N = 1000  # hip_record_app.c's floats per buffer
VA_BASE = 0x153940000000  # the recorder's default KIR_RECORD_VA_BASE (libkir/recorder/recorder.cpp)


def build_app(out: Path, library: Path) -> Path:
    """hip_record_app linked against `library` (a libamdhip64.so)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-O1", str(APP), str(library), f"-Wl,-rpath,{library.parent}",
                    "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def stub_app(hip_stub, tmp_path_factory) -> Path:
    return build_app(tmp_path_factory.mktemp("hip_record_app") / "hip_record_app", hip_stub["lib"] / "libamdhip64.so")


def kir_record(out: Path, app: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", "record", "-o", str(out), "--", str(app), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def expected_y(launches: int) -> list[float]:
    """y after `launches` launches with a = 1, 2, ...: y[i] = i % 7 + i * (1 + ... + launches)."""
    return [float(i % 7) + float(i) * launches * (launches + 1) / 2 for i in range(N)]


def floats(data: bytes) -> list[float]:
    return array("f", data).tolist()


def records_by_a(out: Path) -> list:
    return sorted(Recording(out).records(), key=lambda r: struct.unpack("<f", r.launch.args[0])[0])


def assert_axpy_records(out: Path, count: int, code_object: bytes, arch: str = DEVICE_ARCH,
                        api: str = "hipModuleLaunchKernel") -> None:
    """`count` whole records, the k-th (a = k) holding what the app's launch k read and wrote."""
    records = records_by_a(out)
    assert [struct.unpack("<f", r.launch.args[0])[0] for r in records] == [float(k + 1) for k in range(count)]
    x = floats(array("f", range(N)).tobytes())
    for k, record in enumerate(records):
        record.check()  # every chunk read back, its checksum verified
        assert record.kernel.name == AXPY
        assert record.kernel.image.kind == "code-object" and record.chunk(record.kernel.image.chunk) == code_object
        assert record.device.arch == arch and record.device.name
        assert record.launch.api == api
        assert (record.launch.grid, record.launch.block) == ((4, 1, 1), (256, 1, 1))
        x_at, y_at = (struct.unpack("<Q", record.launch.args[i])[0] for i in (1, 2))
        regions = {r.address: r for r in record.regions}
        for at in (x_at, y_at):  # served by the recorder from its VA range: replay maps them there
            assert regions[at].in_va_range and regions[at].kind == "device"
            assert VA_BASE <= at < VA_BASE + (64 << 30)
        index = {r.address: i for i, r in enumerate(record.regions)}
        assert floats(record.prologue(index[x_at]))[:N] == x == floats(record.epilogue(index[x_at]))[:N]
        assert floats(record.prologue(index[y_at]))[:N] == expected_y(k)
        assert floats(record.epilogue(index[y_at]))[:N] == expected_y(k + 1)
        [launches] = [r.index for r in record.globals if r.name == "launches"]
        assert struct.unpack("<i", record.prologue(launches)) == (k,)
        assert struct.unpack("<i", record.epilogue(launches)) == (k + 1,)


# --- 1. the host-memory HIP device stub --------------------------------------------------

def test_a_hip_app_is_recorded_with_its_code_object_snapshots_and_globals(hip_stub, stub_app, tmp_path):
    out = tmp_path / "records"
    result = kir_record(out, stub_app, str(hip_stub["code_object"]), "3", env=stub_env(hip_stub))
    assert result.returncode == 0, result.stderr
    assert f"sum {sum(expected_y(3)):.1f} launches 3" in result.stdout  # the app's own results, untouched
    assert "kir-record: recorded 3 of 3 launches" in result.stderr, result.stderr
    assert "warning" not in result.stderr, result.stderr  # VA range reserved, nothing flagged
    assert_axpy_records(out, 3, hip_stub["code_object"].read_bytes())


REPLAY = """
import json, sys
from kir.record import Recording
from kir.replay import Replayer
rows = []
for record in Recording(sys.argv[1]).records():
    with Replayer(record, backend="hip") as replayer:
        result = replayer.run(repeat=2)
        rows.append({"a": record.launch.args[0].hex(), "verified": result.verified,
                     "mismatches": len(result.mismatches), "backend": replayer.backend.name})
print(json.dumps(rows))
"""


def test_the_records_replay_verified_on_the_stub(hip_stub, stub_app, tmp_path):
    """Replayer(record, backend="hip") maps the recorded VA range again (the same
    addresses the pointers in the arguments hold), loads the recorded code object,
    restores `launches` by name and checks y and `launches` after the launch."""
    out = tmp_path / "records"
    assert kir_record(out, stub_app, str(hip_stub["code_object"]), "3", env=stub_env(hip_stub)).returncode == 0
    result = python_with_stub(hip_stub, REPLAY.replace("sys.argv[1]", repr(str(out))))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 3
    assert all(r["verified"] and r["mismatches"] == 0 and r["backend"] == "hip" for r in rows), rows


def test_launches_recorded_before_a_crash_are_kept(hip_stub, stub_app, tmp_path):
    """The app dies of a SIGSEGV after two of its three launches: the recorder's crash
    handler waits for the record still being written, and both records read back whole
    (docs/recording.md, Crashes), as tests/record/test_record_crash*.py check for CUDA."""
    out = tmp_path / "records"
    result = kir_record(out, stub_app, str(hip_stub["code_object"]), "3", "2", env=stub_env(hip_stub))
    assert result.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV), result.stderr
    assert "crashing after 2 launches" in result.stdout
    assert_axpy_records(out, 2, hip_stub["code_object"].read_bytes())
    leftovers = [p.name for folder in ("records", "chunks") for p in (out / folder).iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_without_a_device_the_recorder_says_so_and_the_app_runs_on(hip_stub, stub_app, tmp_path):
    """STUB_HIP_DEVICES=0: no VA range (the recorder names the HIP error), every call the
    app makes fails as without kir, nothing recorded, no crash."""
    env = stub_env(hip_stub, STUB_HIP_DEVICES="0")
    bare = subprocess.run([str(stub_app), str(hip_stub["code_object"]), "1"], capture_output=True, text=True,
                          env=env, timeout=60)
    result = kir_record(tmp_path / "records", stub_app, str(hip_stub["code_object"]), "1", env=env)
    assert result.returncode == bare.returncode
    assert result.stdout == bare.stdout
    assert "hipMalloc 100" in result.stdout  # hipErrorNoDevice, the app's own
    assert "cannot reserve the VA range: no HIP device: hipInit: hipErrorNoDevice (100)" in result.stderr, result.stderr


def test_the_vendor_setting_is_checked(hip_stub, stub_app, tmp_path):
    env = stub_env(hip_stub, KIR_RECORD_VENDOR="opencl")
    result = kir_record(tmp_path / "records", stub_app, str(hip_stub["code_object"]), "1", env=env)
    assert result.returncode == 0, result.stderr  # the app runs, unrecorded
    assert "kir-record: disabled: KIR_RECORD_VENDOR=opencl: expected cuda or hip" in result.stderr


KERNEL_APP = FIXTURES / "hip_record_kernel_app.hip"


@pytest.fixture(scope="module")
def kernel_app(hip_stub, tmp_path_factory) -> Path:
    """hip_record_kernel_app: clang-22 registers its gfx942 bundle, the app launches by host function."""
    library = hip_stub["lib"] / "libamdhip64.so"
    out = tmp_path_factory.mktemp("hip_record_kernel_app") / "hip_record_kernel_app"
    subprocess.run(["clang-22", "-x", "hip", "-nogpulib", "-nogpuinc", "-I", str(FIXTURES), f"--offload-arch={ARCH}",
                    str(KERNEL_APP), "-x", "none", str(library), f"-Wl,-rpath,{library.parent}", "-o", str(out)],
                   check=True)
    return out


def test_launches_by_host_function_are_recorded_from_the_registration(hip_stub, kernel_app, tmp_path):
    """hipLaunchKernel of a kernel clang registered (__hipRegisterFatBinary's bundle): the
    record holds the bundle's gfx942 code object, the global `launches` registered with
    __hipRegisterVar (found by hipGetSymbolAddress), the VA-stable x and y; it replays verified."""
    out = tmp_path / "records"
    result = kir_record(out, kernel_app, env=stub_env(hip_stub))
    assert result.returncode == 0, result.stderr
    assert f"sum {sum(expected_y(3)):.1f} launches 3" in result.stdout
    assert "kir-record: recorded 3 of 3 launches" in result.stderr, result.stderr
    [code_object] = [i.read() for i in kir.open(kernel_app).images if i.kind == "code-object"]
    assert_axpy_records(out, 3, code_object, api="hipLaunchKernel")
    replayed = python_with_stub(hip_stub, REPLAY.replace("sys.argv[1]", repr(str(out))))
    assert replayed.returncode == 0, replayed.stderr
    rows = json.loads(replayed.stdout)
    assert len(rows) == 3 and all(r["verified"] and r["backend"] == "hip" for r in rows), rows


# --- 2. Debian's real libamdhip64.so, no GPU ------------------------------------------------

@pytest.fixture(scope="module")
def real_app(tmp_path_factory) -> Path:
    library = real_hip_library()
    if amd_gpu_count():
        pytest.skip("an AMD GPU is present: the no-device results do not apply")
    return build_app(tmp_path_factory.mktemp("real_hip_record") / "hip_record_app", library)


def test_the_real_runtime_without_a_gpu_is_no_device_and_passes_errors_through(hip_stub, real_app, tmp_path):
    """The real runtime fails every device call without a GPU (tests/hook/test_hook_real_hip.py
    says with which codes): under `kir record` the app sees exactly those, the recorder
    says there is no HIP device (hipInit's error, named: 5.2 answers hipErrorInvalidDevice)
    and records nothing."""
    code_object = str(hip_stub["code_object"])
    bare = subprocess.run([str(real_app), code_object, "2"], capture_output=True, text=True, timeout=120)
    out = tmp_path / "records"
    result = kir_record(out, real_app, code_object, "2", env=dict(os.environ))
    assert result.returncode == bare.returncode == 1, result.stderr
    assert result.stdout == bare.stdout
    assert "hipMalloc 0" not in result.stdout
    assert "kir-record: warning: cannot reserve the VA range: no HIP device: hipInit: hipErrorInvalidDevice (101)" in result.stderr, result.stderr
    assert "kir-record: recorded 0 of" in result.stderr


# --- 3. a real AMD GPU (skips here) --------------------------------------------------------

def test_a_hip_app_is_recorded_and_replayed_on_an_amd_gpu(amd_gpu, tmp_path):
    """hip_record_app against the real runtime, axpy built for this GPU's processor:
    three records, each replayed verified by the real runtime."""
    from hip import hip
    properties = hip.hipDeviceProp_t()
    hip.hipGetDeviceProperties(properties, 0)
    device_arch = properties.gcnArchName.decode()
    code_object = tmp_path / "axpy.co"
    subprocess.run(["clang-22", "-x", "hip", "-nogpulib", "-nogpuinc", "-I", str(FIXTURES),
                    f"--offload-arch={device_arch.split(':')[0]}", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-O2", str(FIXTURES / "hip_axpy.hip"), "-o", str(code_object)], check=True)
    app = build_app(tmp_path / "hip_record_app", real_hip_library())
    out = tmp_path / "records"
    result = kir_record(out, app, str(code_object), "3", env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert "kir-record: recorded 3 of 3 launches" in result.stderr, result.stderr
    assert_axpy_records(out, 3, code_object.read_bytes(), arch=device_arch)
    from kir.replay import Replayer
    for record in Recording(out).records():
        with Replayer(record, backend="auto") as replayer:
            assert replayer.backend.name == "hip"
            result = replayer.run(repeat=3)
            assert result.verified, result.mismatches
            assert len(result.times_ms) == 3 and all(t > 0 for t in result.times_ms)

