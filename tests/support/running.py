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
