"""The level-(1) HIP rig of the replay tests (issue 25): tests/fixtures/hip_device_stub.c
built as libamdhip64.so (a HIP device on the host whose kernels are host functions),
the gfx942 code object of tests/fixtures/hip_axpy.hip built by clang-22, a record of
one axpy launch on it written by the C++ writer (kir._core.RecordBuilder) as the hook
writes a HIP launch's, and `run_with_stub`: a command in a process whose hip-python
finds the stub (hip-python dlopens "libamdhip64.so" on its first call:
LD_LIBRARY_PATH is read when the process starts, hence a process of its own).

`amd_gpu`: a marker-like fixture that skips unless a real AMD GPU answers (/dev/kfd
and hipGetDeviceCount > 0 through hip-python)."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kir import _core, hashing
from kir.hashing import kernel_static_hash
from kir.record import Record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AXPY = "_Z4axpyfPKfPfi"
SONAME = "libamdhip64.so.6"  # ROCm 6's (readelf -d); Debian's ROCm 5.2: libamdhip64.so.5
ARCH = "gfx942"
DEVICE_ARCH = "gfx942:sramecc+:xnack-"  # the stub's gcnArchName
BASE = 0x7F10_0000_0000
N, A = 1000, 2.0


@pytest.fixture(scope="session")
def hip_stub(tmp_path_factory) -> dict:
    """{"lib": the directory holding the stub libamdhip64.so, "code_object": the axpy
    code object, "ir": its device LLVM bitcode, "code_object_plain" and "ir_plain": the
    same without the module global `launches`}; skips without clang-22, gcc or hip-python."""
    pytest.importorskip("hip", reason="hip-python is not installed (the hip extra)")
    for tool in ("clang-22", "gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    d = tmp_path_factory.mktemp("hip_device")
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", str(FIXTURES / "hip_device_stub.c"),
                    f"-Wl,-soname,{SONAME}", "-o", SONAME], check=True, cwd=d)
    (d / "libamdhip64.so").symlink_to(SONAME)  # the name hip-python dlopens
    built = {"lib": d}
    for suffix, flags in (("", []), ("_plain", ["-DKIR_AXPY_NO_GLOBAL"])):
        code_object, ir = d / f"axpy{suffix}.co", d / f"axpy{suffix}.bc"
        common = ["clang-22", "-x", "hip", "-nogpulib", "-nogpuinc", "-I", str(FIXTURES), f"--offload-arch={ARCH}",
                  "--cuda-device-only", "--no-gpu-bundle-output", "-O2", *flags]
        subprocess.run([*common, str(FIXTURES / "hip_axpy.hip"), "-o", str(code_object)], check=True)
        subprocess.run([*common, "-emit-llvm", "-c", str(FIXTURES / "hip_axpy.hip"), "-o", str(ir)], check=True)
        built[f"code_object{suffix}"], built[f"ir{suffix}"] = code_object, ir.read_bytes()
    return built


def axpy_hip_record(directory, code_object: Path, *, grid=(4, 1, 1), block=(256, 1, 1), wrong_epilogue=False,
                    launches_before=0, arch: str = ARCH, ir: bytes | None = None, jit_args=(),
                    launches_global: bool = True) -> Record:
    """A record of axpy(2, x, y, 1000) on the gfx942 code object, as the hook writes a
    HIP launch: the image (kind "code-object"), its static hash and parameters as kir
    reads them from the code object, the launch identity by the hook's recipe, x and y
    mapped in the VA range and the module's global `launches`; the epilogue y = 2x + y
    and launches + 1 (`wrong_epilogue`: y's first element off by one). `arch`: the
    code object's processor; `ir`: the kernel's LLVM bitcode, stored as its IR;
    `jit_args`: its runtime-constant arguments (RecordBuilder.set_jit_args' tuples);
    `launches_global`: False for the code object built without `launches`."""
    image = code_object.read_bytes()
    code = _core.parse_code_object(image)
    code.image_digest = _core.xxh3_128(image)
    static = kernel_static_hash(code, AXPY)
    [kernel] = [k for k in code.kernels if k.name == AXPY]
    args = [struct.pack("<f", A), struct.pack("<Q", BASE), struct.pack("<Q", BASE + (1 << 21)), struct.pack("<i", N)]
    identity = hashing.launch_identity(static.hex, arch, args, grid=grid, block=block)
    b = _core.RecordBuilder(str(directory))
    b.set_process(4321, -1)
    b.set_device("AMD Instinct MI300A", arch, 0)
    b.set_kernel(AXPY, "axpy(float, float const*, float*, int)", static, [p.offset for p in kernel.params],
                 [p.size for p in kernel.params])
    b.set_image("code-object", arch, image)
    if ir is not None:
        b.set_ir(ir)
    if jit_args:
        b.set_jit_args(list(jit_args))
    b.set_launch("hipModuleLaunchKernel", _core.Hash128.from_hex(identity), tuple(grid), tuple(block), 0, 0, args, 0)
    b.set_va_range(BASE, 1 << 30)
    x = [float(i) for i in range(N)]
    y = [float(i % 7) for i in range(N)]
    out = [A * u + v for u, v in zip(x, y)]
    if wrong_epilogue:
        out[0] += 1.0
    for address, before, after in ((BASE, x, x), (BASE + (1 << 21), y, out)):
        region = b.add_allocation(address, 4 * N, "device", True)
        b.snapshot(region, False, struct.pack(f"<{N}f", *before))
        b.snapshot(region, True, struct.pack(f"<{N}f", *after))
    if launches_global:
        launches = b.add_global("launches", 0x1000, 4)
        b.snapshot(launches, False, struct.pack("<i", launches_before))
        b.snapshot(launches, True, struct.pack("<i", launches_before + 1))
    return Record.load(b.write())


def stub_env(hip_stub: dict, log: Path | None = None, **extra: str) -> dict:
    env = {**os.environ, "LD_LIBRARY_PATH": str(hip_stub["lib"]), **extra}
    if log is not None:
        env["STUB_HIP_LOG"] = str(log)
    return env


def run_with_stub(hip_stub: dict, argv: list[str], log: Path | None = None, **extra: str) -> subprocess.CompletedProcess:
    """argv in a process whose libamdhip64.so is the stub (STUB_HIP_LOG=log: its launches)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=stub_env(hip_stub, log, **extra))


def python_with_stub(hip_stub: dict, code: str, log: Path | None = None, **extra: str) -> subprocess.CompletedProcess:
    """Python `code` run as a script against the stub (tests/support importable)."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return run_with_stub(hip_stub, [sys.executable, "-c", code], log, **env, **extra)


def launches(log: Path) -> list[dict]:
    """The stub's log of launches: name, grid, block, shared, args (bytes)."""
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        words = line.split()
        assert words[0] == "launch", line
        out.append({"name": words[1], "grid": tuple(map(int, words[3].split(","))),
                    "block": tuple(map(int, words[5].split(","))), "shared": int(words[7]),
                    "args": bytes.fromhex(words[9]) if len(words) > 9 else b""})
    return out


@pytest.fixture(scope="session")
def amd_gpu():
    """Skips unless this machine has an AMD GPU that HIP sees (/dev/kfd, hip-python's
    hipGetDeviceCount > 0): the level-(3) tests of issue 25 run there as they are."""
    import running
    running.require_amd_gpu()
    pytest.importorskip("hip.hip", reason="hip-python is not installed (the hip extra)")
