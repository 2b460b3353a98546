"""The release wheels, built as a release builds them (scripts/build-wheels.sh: zig's
clang for glibc 2.28, then auditwheel repair; docs/install.md) and checked from
outside: cp310, cp311 and cp312-abi3, each tagged manylinux_2_28_x86_64 and found so by
`auditwheel show`; every shared object needs glibc <= 2.28 and no library outside
glibc (zstd, lz4, zlib and libc++ are inside, hidden); one copy of each library, LICENSE
and metadata. Then each wheel is installed into a fresh virtual environment of every
CPython 3.10-3.13 it fits and smoke-tested there (`kir --version`, `kir inspect` of a
fatbin fixture, `import kir._core`); under the running Python, kir runs on no system
compression library and a downstream CMake project builds against the wheel's package.
Slow (three builds of kir on the first run; later runs reuse build/zig-2.28-*); it
runs in CI, where a missing interpreter is a failure, not a skip."""
from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from native_build import run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-wheels.sh"
DISTRIBUTION = "kir_kernel_ir"
VERSION = "0.1.0"
PLATFORM = "manylinux_2_28_x86_64"
TAGS = {"cp310": ("cp310", "cp310"), "cp311": ("cp311", "cp311"), "cp312": ("cp312", "abi3")}
# What a manylinux_2_28 wheel's shared objects may need besides each other: glibc.
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}
# A release build of three wheels, auditwheel and fresh environments: `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow


class Wheel:
    def __init__(self, path: Path) -> None:
        self.path = path
        name, version, self.py, self.abi, self.platforms = path.name[:-len(".whl")].split("-")
        assert (name, version) == (DISTRIBUTION, VERSION), path.name
        self.zip = zipfile.ZipFile(path)
        self.names = self.zip.namelist()

    @property
    def stable_abi(self) -> bool:
        return self.abi == "abi3"


def tag_for(version: tuple[int, int]) -> str:
    """The wheel a CPython of `version` installs: its own below 3.12, the abi3 one from 3.12 on."""
    return "cp312" if version >= (3, 12) else f"cp{version[0]}{version[1]}"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Wheel]:
    out = tmp_path_factory.mktemp("dist")
    proc = run("bash", SCRIPT, out, cwd=ROOT)
    paths = [Path(line) for line in proc.stdout.split()]
    assert sorted(p.parent for p in paths) == [out] * 3 and all(p.is_file() for p in paths), proc.stdout
    built = {p.name.split("-")[2]: Wheel(p) for p in paths}
    assert sorted(built) == sorted(TAGS), proc.stdout
    return built


def auditwheel() -> Path:
    return ROOT / "build" / "wheel-tools" / "bin" / "auditwheel"  # the script's tool environment


@pytest.mark.parametrize("tag", sorted(TAGS))
def test_wheel_tags(wheels, tag):
    """cpXY-cpXY below 3.12, cp312-abi3 (nanobind's stable ABI) from 3.12 on; one
    platform tag, manylinux_2_28_x86_64, in the name and in WHEEL."""
    wheel = wheels[tag]
    assert (wheel.py, wheel.abi, wheel.platforms) == (*TAGS[tag], PLATFORM)
    info = wheel.zip.read(f"{DISTRIBUTION}-{VERSION}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in info
    assert [line.split(": ")[1] for line in info.splitlines() if line.startswith("Tag: ")] == [
        f"{wheel.py}-{wheel.abi}-{PLATFORM}"]
    extension = [n for n in wheel.names if n.startswith("kir/_core.") and n.endswith(".so")]
    expected = "kir/_core.abi3.so" if wheel.stable_abi else f"kir/_core.cpython-{tag[2:]}-x86_64-linux-gnu.so"
    assert extension == [expected]


@pytest.mark.parametrize("tag", sorted(TAGS))
def test_auditwheel_show_says_manylinux_2_28(wheels, tag):
    """`auditwheel show`: the wheel is consistent with manylinux_2_28 (or an older
    policy, which 2_28 includes: auditwheel names the oldest the symbols allow), and
    the glibc versions it lists go no higher than 2.28."""
    proc = run(auditwheel(), "show", wheels[tag].path)
    text = " ".join(proc.stdout.split())
    policy = re.search(r'is consistent with the following platform tag: "manylinux_2_(\d+)_x86_64"', text)
    assert policy and int(policy.group(1)) <= 28, proc.stdout
    versions = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", text)]
    assert versions and max(versions) <= (2, 28), proc.stdout


def shared_objects(wheel: Wheel):
    for name in wheel.names:
        if re.search(r"\.so(\.|$)", name):
            yield name, ELFFile(io.BytesIO(wheel.zip.read(name)))


@pytest.mark.parametrize("tag", sorted(TAGS))
def test_shared_objects_need_only_glibc_2_28(wheels, tag):
    """Each shared object: DT_NEEDED only glibc's libraries and kir's own (no
    libstdc++, libzstd, liblz4, libz: linked in statically), glibc symbol versions
    <= 2.28, and none of the static libraries' symbols exported (zstd, lz4, zlib;
    zig's operator new/delete), so they never take the place of an application's own
    (scripts/zig_cc.py's version script does what -Wl,--exclude-libs,ALL does)."""
    own = {n.rsplit("/", 1)[-1] for n in wheels[tag].names if n.endswith(".so")}
    for name, elf in shared_objects(wheels[tag]):
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        needed = {t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
        assert needed <= GLIBC_LIBRARIES | own, (name, needed - GLIBC_LIBRARIES)
        versions = set()
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    versions |= {a.name for a in auxiliaries}
        glibc = [tuple(map(int, v[len("GLIBC_"):].split("."))) for v in versions if v.startswith("GLIBC_2")]
        assert glibc and max(glibc) <= (2, 28), (name, sorted(versions))
        assert not [v for v in versions if v.startswith(("GLIBCXX", "CXXABI"))], (name, versions)
        exported = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
                    if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] != "STB_LOCAL"}
        leaked = sorted(s for s in exported if re.match(r"(ZSTD|ZSTDv|HUF|FSE|LZ4|XXH|deflate|inflate|crc32|adler32)|_Znwm|_Znam|_ZdlPv|_ZdaPv", s))
        assert not leaked, (name, leaked[:10])


@pytest.mark.parametrize("tag", sorted(TAGS))
def test_wheel_holds_each_library_once_and_the_license(wheels, tag):
    """libkir.so once (no .so.0/.so.0.1.0 copies of it), no two shared objects with
    the same bytes, no symlink entries, nothing vendored by auditwheel (the compression
    libraries are inside kir's own objects); LICENSE and the PEP 639 metadata; the
    headers and the CMake package."""
    wheel = wheels[tag]
    assert [n for n in wheel.names if re.search(r"/libkir\.so", n)] == ["kir/lib/libkir.so"]
    digests: dict[str, str] = {}
    for info in wheel.zip.infolist():
        assert not stat.S_ISLNK(info.external_attr >> 16), info.filename
        if re.search(r"\.so(\.|$)", info.filename):
            digest = hashlib.sha256(wheel.zip.read(info)).hexdigest()
            assert digest not in digests, f"{info.filename} is a copy of {digests.get(digest)}"
            digests[digest] = info.filename
    for name in ("libkir_hook.so", "libkir_record.so", "libkir_jit.so", "libkir.a", "cmake/kir/kirConfig.cmake",
                 "cmake/kir/kirTargets.cmake"):
        assert f"kir/lib/{name}" in wheel.names
    assert "kir/include/kir/kir.h" in wheel.names and "kir/include/kir/binary.hpp" in wheel.names
    assert not [n for n in wheel.names if n.startswith(f"{DISTRIBUTION}.libs/")]
    dist_info = f"{DISTRIBUTION}-{VERSION}.dist-info"
    assert wheel.zip.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    meta = wheel.zip.read(f"{dist_info}/METADATA").decode()
    assert "\nName: kir-kernel-ir\n" in meta and "\nLicense-Expression: Apache-2.0\n" in meta
    assert "\nLicense-File: LICENSE\n" in meta


def interpreter(version: str) -> Path:
    """CPython `version` as the build script finds it (python3.X on PATH, pyenv's
    versions): CI must have every one (a failure there), elsewhere a skip."""
    proc = subprocess.run(["bash", str(SCRIPT), "--python", version], capture_output=True, text=True)
    if proc.returncode != 0:
        message = f"no CPython {version} to install the wheel into: {proc.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Path(proc.stdout.strip())


def fresh_venv(python: Path, wheel: Wheel, where: Path) -> Path:
    """A fresh virtual environment of `python` (no system site-packages) with the wheel
    and its dependencies installed."""
    run(python, "-m", "venv", where)
    run(where / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel.path)
    return where


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_wheel_smoke_in_fresh_venv(wheels, built, tmp_path, version):
    """The wheel that fits CPython `version`, installed into a fresh venv of it: `kir
    --version` names the release; `kir inspect` of a fatbin and of an executable that
    embeds one prints what this checkout's kir prints; `import kir._core` loads the
    wheel's extension (the abi3 one from 3.12 on)."""
    python = interpreter(version)
    wheel = wheels[tag_for(tuple(map(int, version.split("."))))]
    venv = fresh_venv(python, wheel, tmp_path / "venv")
    env = clean_env()
    assert run(venv / "bin" / "kir", "--version", env=env, cwd=tmp_path).stdout.splitlines()[0] == f"kir-kernel-ir {VERSION}"
    for fixture in (built["kernels.fatbin"], built["app"]):
        theirs = run(venv / "bin" / "kir", "inspect", fixture, env=env, cwd=tmp_path).stdout
        ours = run(sys.executable, "-m", "kir", "inspect", fixture).stdout
        assert theirs == ours and "sm_90" in theirs
    core = run(venv / "bin" / "python", "-c", "import sys, kir._core; print(sys.version_info[:2], kir._core.__file__)",
               env=env, cwd=tmp_path).stdout
    assert core.startswith(str(tuple(map(int, version.split("."))))) and str(venv) in core
    assert core.strip().endswith("_core.abi3.so" if wheel.stable_abi else f"_core.cpython-{version.replace('.', '')}-x86_64-linux-gnu.so")


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> Path:
    """The running Python's wheel in a fresh virtual environment of it."""
    python = Path(getattr(sys, "_base_executable", sys.executable))
    return fresh_venv(python, wheels[tag_for(sys.version_info[:2])], tmp_path_factory.mktemp("venv"))


def site_package(venv: Path) -> Path:
    return Path(run(venv / "bin" / "python", "-c", "import kir, os; print(os.path.dirname(kir.__file__))",
                    cwd=venv).stdout.strip())


def test_installed_wheel_loads_no_system_compression_library(installed, built):
    """`kir inspect --kernels` from the installed wheel prints what this checkout's kir
    prints; its extension and libkir.so load no libzstd, liblz4 or libz (inside them);
    the recording and JIT clients find the hook layer beside them."""
    env = clean_env()
    theirs = run(installed / "bin" / "kir", "inspect", "--kernels", built["app_compress_all"], env=env, cwd=installed).stdout
    ours = run(sys.executable, "-m", "kir", "inspect", "--kernels", built["app_compress_all"]).stdout
    assert theirs == ours and "kernel" in theirs
    package = site_package(installed)
    for library in (next(package.glob("_core.*.so")), package / "lib" / "libkir.so"):
        loaded = run("ldd", library, env=env).stdout
        assert not re.search(r"lib(zstd|lz4|z|stdc\+\+)\.so", loaded), (library.name, loaded)
    for client in ("libkir_record.so", "libkir_jit.so"):  # their RUNPATH kept $ORIGIN: the hook layer beside them
        lines = run("ldd", package / "lib" / client, env=env).stdout.splitlines()
        hook = [line.split()[2] for line in lines if line.split()[:2] == ["libkir_hook.so", "=>"]]
        assert hook and Path(hook[0]).resolve() == (package / "lib" / "libkir_hook.so").resolve(), lines


@pytest.mark.parametrize("target", ["list_kernels", "list_kernels_static"])
def test_downstream_project_against_the_installed_wheel(installed, built, tmp_path, target):
    """tests/packaging/downstream configured with the installed wheel's kir.cmake_dir()
    builds and runs: kir::kir (the C ABI of the wheel's libkir.so) with this machine's
    compilers; kir::kir_static (libkir.a, C++ built on LLVM's libc++) with a libc++
    toolchain, zig's, and this machine's compression libraries (docs/install.md)."""
    cmake_dir = run(installed / "bin" / "python", "-c", "import kir; print(kir.cmake_dir())", cwd=installed).stdout.strip()
    build = tmp_path / "downstream"
    compilers = []
    if target == "list_kernels_static":
        zig = run(ROOT / "build" / "wheel-tools" / "bin" / "python", "-c",
                  "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))").stdout.strip()
        for tool, variable in (("cc", "CMAKE_C_COMPILER"), ("c++", "CMAKE_CXX_COMPILER")):
            wrapper = tmp_path / f"zig-{tool}"
            wrapper.write_text(f'#!/bin/sh\nexec "{zig}" {tool} "$@"\n')  # this machine's glibc, libc++
            wrapper.chmod(0o755)
            compilers.append(f"-D{variable}={wrapper}")
    run("cmake", "-S", ROOT / "tests" / "packaging" / "downstream", "-B", build, "-G", "Ninja", f"-Dkir_DIR={cmake_dir}",
        *compilers)
    run("cmake", "--build", build, "--target", target)
    out = run(build / target, built["app"]).stdout.splitlines()
    import kir
    from native_build import downstream_expected
    expected = downstream_expected(built["app"]) + [f"read {kir.open(built['app']).images[0].size}"]
    assert out == expected
