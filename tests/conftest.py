"""Shared test fixtures: the binaries built by nvcc, the oracles, and a CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The shared rigs (tests/support: build.py, the reference implementations, the stub
# runtimes' rigs ...) import by their plain names; no test module imports another.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import build as fixture_build  # noqa: E402
from running import run_kir  # noqa: E402

# The suite's settings, not its caller's: a KIR_* variable from a kir user's shell
# (KIR_HOOK_LOG, KIR_RECORD_KERNELS, KIR_TRACE ...) would reach every program the
# tests run under the hook. Only the suite's own knobs stay.
SUITE_KNOBS = ("KIR_FUZZ_SECONDS", "KIR_FUZZ_RECORD_EXAMPLES", "KIR_FUZZ_OMP_EXAMPLES", "KIR_FUZZ_MNEME_EXAMPLES",
               "KIR_OPENMP_APPS")
for _name in [n for n in os.environ if n.startswith("KIR_") and n not in SUITE_KNOBS]:
    del os.environ[_name]


@pytest.fixture(scope="session")
def built() -> dict[str, Path]:
    """Every fixture binary (tests/support/build.py), built once and cached under build/."""
    return fixture_build.build_all(ROOT / "build" / "test-fixtures")


def find_cuobjdump() -> str:
    from kir.sass import find_cuda_tool  # on PATH, else the nvidia-cuda-cuobjdump wheel's
    return find_cuda_tool("cuobjdump") or pytest.fail("cuobjdump not found: pip install nvidia-cuda-cuobjdump")


@pytest.fixture(scope="session")
def cuobjdump() -> str:
    return find_cuobjdump()


@pytest.fixture
def kir_cli():
    return run_kir


DECOY = fixture_build.source("stub_cuda/decoy.c")


@pytest.fixture(scope="session")
def decoy_libraries(tmp_path_factory) -> Path:
    """Libraries named as the stub runtimes are (libcuda.so.1, libcudart.so,
    libamdhip64.so) that exit 86 as they load."""
    d = tmp_path_factory.mktemp("decoys")
    (d / "decoy.c").write_text(DECOY)
    for name in ("libcuda.so.1", "libcudart.so", "libamdhip64.so"):
        subprocess.run(["gcc", "-shared", "-fPIC", f'-DNAME="{name}"', "decoy.c", f"-Wl,-soname,{name}",
                        "-o", name], check=True, cwd=d)
    return d


@pytest.fixture
def hostile_library_path(decoy_libraries, monkeypatch):
    """LD_LIBRARY_PATH naming the decoys, as a GPU machine names the real driver's
    directory: a program that looks for its stubs anywhere else first (DT_RUNPATH
    rather than DT_RPATH, build.rpath) loads a decoy and exits 86. For tests whose
    programs run with this process's environment (kir_cli)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(decoy_libraries))


@pytest.fixture(scope="session")
def gpu():
    """Skip, visibly, unless the CUDA driver loads and sees a GPU."""
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")
    try:
        err, = driver.cuInit(0)
    except Exception as error:
        pytest.skip(f"no GPU driver: {error}")
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        pytest.skip("no GPU present")
