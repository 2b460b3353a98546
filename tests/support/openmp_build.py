"""OpenMP offload objects built at test time by clang-22 and flang-22 from
tests/fixtures/openmp (region.cpp: two C++ regions, one with a count; offload.f90: a
Fortran region), each into a directory of its own: the source is copied there and
compiled by its bare name, as a build in another checkout would, so two builds differ
in the source file's inode (the kernel names' file id) and nothing else.

How the device code is kept (docs/openmp.md): clang's `-foffload-lto` keeps LLVM IR in
`.llvm.offloading`, without it a device ELF (cubin, code object); flang-22 has no
`-foffload-lto`, so its IR route is `--offload-device-only -emit-llvm`, packaged by
clang-offload-packager-22 and embedded with `-fembed-offload-object`."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from running import require

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openmp"
TRIPLES = {"sm_90": "nvptx64-nvidia-cuda", "gfx90a": "amdgcn-amd-amdhsa"}
# No LLVM 22 device runtime on Debian (issue 27): -nogpulib; CUDA 13 is newer than clang 22 knows.
CUDA = ["--cuda-path=/usr/local/cuda", "-Wno-unknown-cuda-version"]


def run(args, cwd: Path) -> None:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}: {proc.stderr[-3000:]}"


def copy_source(name: str, directory: Path, text: str | None = None) -> Path:
    """tests/fixtures/openmp/<name> copied into `directory` (or `text` written there under
    its name: a changed region)."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / name
    if text is None:
        shutil.copyfile(FIXTURES / name, source)
    else:
        source.write_text(text)
    return source


def clang_object(directory: Path, arch: str, lto: bool, source: str = "region.cpp", text: str | None = None) -> Path:
    """`clang++-22 -fopenmp --offload-arch=<arch> -f[no-]offload-lto -nogpulib -c` in `directory`
    (for AMDGPU, clang's default is LTO: `-fno-offload-lto` gives a code object)."""
    require("clang++-22")
    copy_source(source, directory, text)
    out = directory / f"{Path(source).stem}.{arch}{'.lto' if lto else ''}.o"
    run(["clang++-22", "-fopenmp", f"--offload-arch={arch}", "-foffload-lto" if lto else "-fno-offload-lto", "-nogpulib",
         *(CUDA if arch.startswith("sm_") else []), "-c", source, "-o", out.name], directory)
    return out


def flang_object(directory: Path, arch: str, text: str | None = None) -> Path:
    """`flang-22 -fopenmp --offload-arch=<arch> -c`: a device ELF in `.llvm.offloading`."""
    require("flang-22")
    copy_source("offload.f90", directory, text)
    out = directory / f"offload.{arch}.o"
    run(["flang-22", "-fopenmp", f"--offload-arch={arch}", *([] if arch.startswith("sm_") else ["-nogpulib"]),
         "-c", "offload.f90", "-o", out.name], directory)
    return out


def flang_device_bitcode(directory: Path, arch: str, text: str | None = None) -> Path:
    """`flang-22 -fopenmp --offload-arch=<arch> --offload-device-only -emit-llvm -c`: a bare
    bitcode file, the device module."""
    require("flang-22")
    copy_source("offload.f90", directory, text)
    out = directory / f"offload.{arch}.bc"
    run(["flang-22", "-fopenmp", f"--offload-arch={arch}", *([] if arch.startswith("sm_") else ["-nogpulib"]),
         "--offload-device-only", "-emit-llvm", "-c", "offload.f90", "-o", out.name], directory)
    return out


def flang_ir_object(directory: Path, arch: str, text: str | None = None) -> Path:
    """A flang-22 object whose `.llvm.offloading` holds the device IR (the layout of clang's
    -foffload-lto): the device module (flang_device_bitcode), packaged by
    clang-offload-packager-22, embedded by the host compile with -fembed-offload-object."""
    require("clang-offload-packager-22")
    bitcode = flang_device_bitcode(directory, arch, text)
    package = directory / f"offload.{arch}.pkg"
    run(["clang-offload-packager-22", "-o", package.name,
         f"--image=file={bitcode.name},triple={TRIPLES[arch]},arch={arch},kind=openmp"], directory)
    out = directory / f"offload.{arch}.ir.o"
    run(["flang-22", "-fopenmp", f"--offload-arch={arch}", "--offload-host-only",
         "-Xflang", f"-fembed-offload-object={package.name}", "-c", "offload.f90", "-o", out.name], directory)
    return out


def packaged_image(obj: Path, arch: str, out: Path) -> bytes:
    """The `arch` image of `obj`'s offloading binaries, as clang-offload-packager-22 extracts it."""
    require("clang-offload-packager-22")
    run(["clang-offload-packager-22", obj, f"--image=file={out},arch={arch}"], obj.parent)
    return out.read_bytes()
