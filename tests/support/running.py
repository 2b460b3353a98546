"""Running kir as a user does: the installed `kir` CLI in a fresh process, and the C++ test
programs of tests/native/cpp built with CMake."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def require(*tools: str) -> None:
    """Skip the calling test, naming them, unless every program in `tools` is on PATH (the
    LLVM tools are not on the GPU machine: run AI)."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


class Result:
    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr


def native_test_program(target: str) -> Path:
    """One of tests/native/cpp's programs (its CMake target), built in Release with the
    C++ tests under build/native-crash; the test skips without cmake and ninja."""
    if not shutil.which("cmake") or not shutil.which("ninja"):
        pytest.skip("cmake and ninja build the test program")
    build = ROOT / "build" / "native-crash"
    for step in (["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                  "-DKIR_BUILD_TESTS=ON"],
                 ["cmake", "--build", build, "--target", target]):
        proc = subprocess.run([str(s) for s in step], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build / "tests" / "native" / "cpp" / target


def run_kir(*args: str, cwd=None) -> Result:
    """Run the installed `kir` CLI as a user would (a fresh process)."""
    proc = subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)
    return Result(proc)


# The real ROCm HIP runtime: Debian's libamdhip64-dev (ROCm 5.2; scripts/install-system-deps.sh
# --tests installs it) or a ROCm install's. The first found is the one a test links against.
REAL_HIP_LIBRARIES = (Path("/opt/rocm/lib/libamdhip64.so"), Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so"))


def real_hip_library() -> Path:
    """The real libamdhip64.so, or skip the calling test, saying why."""
    for candidate in REAL_HIP_LIBRARIES:
        if candidate.exists():
            return candidate
    pytest.skip("the real ROCm HIP runtime (libamdhip64.so) is not installed: "
                "apt-get install libamdhip64-dev (scripts/install-system-deps.sh --tests), or ROCm")


def amd_gpu_count() -> int:
    """The AMD GPUs the real HIP runtime sees: 0 without /dev/kfd (the ROCm kernel driver's
    device, which every ROCm userspace opens first) or without the runtime, else
    hipGetDeviceCount's count (0 unless it returns hipSuccess). Run in a child process:
    the runtime, once loaded, keeps threads and the device open in the caller."""
    if not Path("/dev/kfd").exists():
        return 0
    library = next((c for c in REAL_HIP_LIBRARIES if c.exists()), None)
    if library is None:
        return 0
    probe = ("import ctypes, sys\n"
             f"hip = ctypes.CDLL({str(library)!r})\n"
             "n = ctypes.c_int(0)\n"
             "print(n.value if hip.hipGetDeviceCount(ctypes.byref(n)) == 0 else 0)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def require_amd_gpu() -> None:
    """Skip the calling test unless an AMD GPU can run it: /dev/kfd exists and the real
    libamdhip64's hipGetDeviceCount counts at least one device (docs/hip.md)."""
    if amd_gpu_count() == 0:
        pytest.skip("requires an AMD GPU: /dev/kfd and hipGetDeviceCount > 0")


def amd_gpu_arch() -> str | None:
    """The first GPU's processor from the KFD topology (gfx_target_version
    MMmmss, decimal: 90010 is gfx90a, 90402 gfx942), no features: "any" code runs
    with XNACK on or off."""
    for props in sorted(Path("/sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        for line in props.read_text().splitlines():
            if line.startswith("gfx_target_version "):
                value = int(line.split()[1])
                if value:
                    major, minor, step = value // 10000, value // 100 % 100, value % 100
                    return f"gfx{major}{minor:x}{step:x}"
    return None
