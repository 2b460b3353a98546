"""OpenMP offload programs linked and runnable (issue 27): tests/fixtures/openmp's
saxpy_app.c (clang-22) and saxpy_app.f90 (flang-22) with kir's minimal device runtime
(tests/fixtures/openmp/kir_ompdevice.c: apt's LLVM 22 has libomptarget but no device
runtime), built into a directory of their own.

- `c_app`: the program, its device code a cubin in `.llvm.offloading` (what
  libomptarget loads); `c_ir_app`: the same source built with `-fopenmp-target-jit`
  elsewhere, whose `.llvm.offloading` holds the linked device IR instead (another build:
  its kernel names carry that copy's file id);
- `fortran_app`, and `fortran_ir`: the Fortran region's device module linked with the
  device runtime's (`--offload-device-only -emit-llvm`, llvm-link-22): flang-22 has no
  `-fopenmp-target-jit`."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from running import require

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openmp"
CUDA = ["--cuda-path=/usr/local/cuda", "-Wno-unknown-cuda-version"]


def _run(args, cwd: Path) -> None:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}: {proc.stderr[-3000:]}"


def _copy(names, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(FIXTURES / name, directory / name)


def runtime_object(directory: Path, arch: str = "sm_90", jit: bool = False) -> Path:
    """kir_ompdevice.c compiled for `arch` (an offloading object; `jit`: its device part IR)."""
    require("clang-22")
    _copy(["kir_ompdevice.c"], directory)
    out = directory / f"kir_ompdevice.{arch}{'.jit' if jit else ''}.o"
    _run(["clang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", *CUDA,
          *(["-fopenmp-target-jit"] if jit else []), "-c", "kir_ompdevice.c", "-o", out.name], directory)
    return out


def c_app(directory: Path, arch: str = "sm_90", jit: bool = False) -> Path:
    """saxpy_app.c linked with the device runtime (`jit`: the IR kept, -fopenmp-target-jit)."""
    runtime = runtime_object(directory, arch, jit)
    _copy(["saxpy_app.c"], directory)
    out = directory / f"saxpy_app{'_jit' if jit else ''}"
    _run(["clang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", *CUDA,
          *(["-fopenmp-target-jit"] if jit else []), "saxpy_app.c", runtime.name, "-o", out.name], directory)
    return out


def fortran_app(directory: Path, arch: str = "sm_90") -> Path:
    require("flang-22")
    runtime = runtime_object(directory, arch)
    _copy(["saxpy_app.f90"], directory)
    out = directory / "fsaxpy_app"
    _run(["flang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", "saxpy_app.f90", runtime.name,
          "-o", out.name], directory)
    return out


def fortran_ir(directory: Path, arch: str = "sm_90") -> Path:
    """The Fortran region's device IR linked with the device runtime's: one bitcode file."""
    require("flang-22")
    require("llvm-link-22")
    _copy(["saxpy_app.f90", "kir_ompdevice.c"], directory)
    _run(["flang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", "--offload-device-only",
          "-emit-llvm", "-c", "saxpy_app.f90", "-o", "region.bc"], directory)
    _run(["clang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", *CUDA, "--offload-device-only",
          "-emit-llvm", "-c", "kir_ompdevice.c", "-o", "runtime.bc"], directory)
    _run(["llvm-link-22", "region.bc", "runtime.bc", "-o", "fsaxpy_app.bc"], directory)
    return directory / "fsaxpy_app.bc"


def axpy_app(directory: Path, arch: str = "sm_90") -> Path:
    """tests/fixtures/omp_region.c + omp_main.c (kir import-omp's program: b = 3a + 1 with a
    declare-target global; prints `4 190`) linked with the device runtime."""
    runtime = runtime_object(directory, arch)
    fixtures = FIXTURES.parent
    for name in ("omp_region.c", "omp_main.c"):
        shutil.copyfile(fixtures / name, directory / name)
    _run(["clang-22", "-O2", "-fopenmp", f"--offload-arch={arch}", "-nogpulib", *CUDA, "omp_region.c", "omp_main.c",
          runtime.name, "-o", "axpy_app"], directory)
    return directory / "axpy_app"


def built_apps(directory: Path) -> dict[str, Path]:
    """Every program and IR file above, each build in a directory of its own under
    `directory` (`python tests/support/openmp_apps.py DIR` builds them for a machine
    without the compilers, the GPU machine: its tests take KIR_OPENMP_APPS=DIR)."""
    return {"c_app": c_app(directory / "c"), "c_ir_app": c_app(directory / "c_jit", jit=True),
            "fortran_app": fortran_app(directory / "fortran"), "fortran_ir": fortran_ir(directory / "fortran_ir"),
            "axpy_app": axpy_app(directory / "axpy")}


def prebuilt(directory: Path) -> dict[str, Path]:
    """built_apps' files in `directory`, built elsewhere (KeyError-free: missing ones are absent)."""
    names = {"c_app": "c/saxpy_app", "c_ir_app": "c_jit/saxpy_app_jit", "fortran_app": "fortran/fsaxpy_app",
             "fortran_ir": "fortran_ir/fsaxpy_app.bc", "axpy_app": "axpy/axpy_app"}
    return {key: directory / name for key, name in names.items() if (directory / name).is_file()}


if __name__ == "__main__":
    import sys
    for name, path in built_apps(Path(sys.argv[1]).resolve()).items():
        print(name, path)
