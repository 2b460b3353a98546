"""The wheel a user installs, built as a release is (scripts/build-wheel.sh: pip
wheel, then auditwheel repair; docs/install.md) and inspected from outside:
its tags (cp312-abi3 when a CPython >= 3.12 built it, manylinux_2_X), one copy
of each library, LICENSE and metadata, `auditwheel show` consistent with the
tag it carries; then installed into a fresh virtual environment, where kir
runs on the vendored compression libraries and a downstream CMake project
builds against the wheel's CMake package and runs. Slow (it builds kir once
more, a few minutes); it runs in CI."""
from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from native_build import run

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "kir_kernel_ir"
VERSION = "0.1.0"
# A release build of the wheel, auditwheel and a downstream CMake build: `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow


class Wheel:
    def __init__(self, path: Path, python: str, tag: str, log: str) -> None:
        self.path, self.python, self.tag, self.log = path, python, tag, log
        name, version, self.py, self.abi, self.platforms = path.name[:-len(".whl")].split("-")
        assert (name, version) == (DISTRIBUTION, VERSION), path.name
        self.zip = zipfile.ZipFile(path)
        self.names = self.zip.namelist()

    @property
    def stable_abi(self) -> bool:
        return int(self.tag[2:]) >= 312


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Wheel:
    out = tmp_path_factory.mktemp("dist")
    proc = run("bash", ROOT / "scripts" / "build-wheel.sh", out, cwd=ROOT)
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.parent == out and path.is_file(), proc.stdout
    used = re.search(r"build-wheel: building with (\S+) \((cp\d+)\)", proc.stderr)
    assert used, proc.stderr[-2000:]
    return Wheel(path, used.group(1), used.group(2), proc.stderr)


def test_wheel_tags(wheel):
    """cp312-abi3 from CPython >= 3.12 (nanobind's stable ABI), else the building
    Python's own tag; the platform only manylinux_2_X tags (auditwheel repair)."""
    if wheel.stable_abi:
        assert (wheel.py, wheel.abi) == ("cp312", "abi3")
    else:
        assert (wheel.py, wheel.abi) == (wheel.tag, wheel.tag)
    platforms = wheel.platforms.split(".")
    assert platforms and all(re.fullmatch(r"manylinux_2_\d+_x86_64|manylinux\d+_x86_64", p) for p in platforms)
    info = wheel.zip.read(f"{DISTRIBUTION}-{VERSION}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in info
    assert {line.split(": ")[1] for line in info.splitlines() if line.startswith("Tag: ")} == {
        f"{wheel.py}-{wheel.abi}-{p}" for p in platforms}
    extension = [n for n in wheel.names if n.startswith("kir/_core.") and n.endswith(".so")]
    assert len(extension) == 1 and (extension == ["kir/_core.abi3.so"]) == wheel.stable_abi, extension


def test_wheel_holds_each_library_once_and_the_license(wheel):
    """libkir.so once (no .so.0/.so.0.1.0 copies of it), no two shared objects
    with the same bytes, no symlink entries; LICENSE and the PEP 639 metadata;
    the headers and the CMake package; the vendored compression libraries
    (libzstd and liblz4; zlib is one manylinux lets a wheel take from the system)."""
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
    vendored = sorted(n.split("/")[-1].split("-")[0] for n in wheel.names
                      if n.startswith(f"{DISTRIBUTION}.libs/") and not n.endswith("/"))
    assert vendored == ["liblz4", "libzstd"], vendored  # zlib is one of manylinux's system libraries
    dist_info = f"{DISTRIBUTION}-{VERSION}.dist-info"
    assert wheel.zip.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    meta = wheel.zip.read(f"{dist_info}/METADATA").decode()
    assert "\nName: kir-kernel-ir\n" in meta and "\nLicense-Expression: Apache-2.0\n" in meta
    assert "\nLicense-File: LICENSE\n" in meta


def test_auditwheel_show_agrees_with_the_tag(wheel):
    """auditwheel (from the script's tool environment) finds the repaired wheel
    consistent with the manylinux tag it carries: nothing outside the policy."""
    auditwheel = ROOT / "build" / f"wheel-venv-{wheel.tag}" / "bin" / "auditwheel"
    proc = run(auditwheel, "show", wheel.path)
    text = " ".join(proc.stdout.split())
    tag = wheel.platforms.split(".")[0]
    assert f'is consistent with the following platform tag: "{tag}"' in text, proc.stdout


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment (the wheel's Python, no system site-packages)
    with the wheel and its dependencies installed."""
    venv = tmp_path_factory.mktemp("venv")
    run(wheel.python, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel.path)
    return venv


def site_package(venv: Path) -> Path:
    return Path(run(venv / "bin" / "python", "-c", "import kir, os; print(os.path.dirname(kir.__file__))",
                    cwd=venv).stdout.strip())


def test_installed_wheel_runs_on_its_vendored_libraries(installed, built):
    """`kir inspect --kernels` from the installed wheel prints what this checkout's
    kir prints; its extension and libkir.so load libzstd and liblz4 from the
    wheel's own kir_kernel_ir.libs, not from the system; the recording and JIT
    clients find the hook layer beside them."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV")}
    theirs = run(installed / "bin" / "kir", "inspect", "--kernels", built["app"], env=env, cwd=installed).stdout
    ours = run(sys.executable, "-m", "kir", "inspect", "--kernels", built["app"]).stdout
    assert theirs == ours and "kernel" in theirs
    package = site_package(installed)
    for library in (package / "_core.abi3.so" if (package / "_core.abi3.so").exists() else
                    next(package.glob("_core.*.so")), package / "lib" / "libkir.so"):
        resolved = {}
        for line in run("ldd", library, env=env).stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>":
                resolved[parts[0]] = parts[2]
        for name in ("libzstd", "liblz4"):
            path = next((p for n, p in resolved.items() if n.startswith(name)), None)
            assert path and f"/{DISTRIBUTION}.libs/" in path, (library.name, resolved)
    for client in ("libkir_record.so", "libkir_jit.so"):  # their RUNPATH kept $ORIGIN: the hook layer beside them
        lines = run("ldd", package / "lib" / client, env=env).stdout.splitlines()
        hook = [line.split()[2] for line in lines if line.split()[:2] == ["libkir_hook.so", "=>"]]
        assert hook and Path(hook[0]).resolve() == (package / "lib" / "libkir_hook.so").resolve(), lines


@pytest.mark.parametrize("target", ["list_kernels", "list_kernels_static"])
def test_downstream_project_against_the_installed_wheel(installed, built, tmp_path, target):
    """tests/packaging/downstream configured with the installed wheel's kir.cmake_dir()
    builds and runs (kir::kir on the wheel's libkir.so and its vendored
    libraries; kir::kir_static with this machine's compression libraries)."""
    cmake_dir = run(installed / "bin" / "python", "-c", "import kir; print(kir.cmake_dir())", cwd=installed).stdout.strip()
    build = tmp_path / "downstream"
    run("cmake", "-S", ROOT / "tests" / "packaging" / "downstream", "-B", build, "-G", "Ninja", f"-Dkir_DIR={cmake_dir}")
    run("cmake", "--build", build, "--target", target)
    out = run(build / target, built["app"]).stdout.splitlines()
    import kir
    from native_build import downstream_expected
    expected = downstream_expected(built["app"]) + [f"read {kir.open(built['app']).images[0].size}"]
    assert out == expected
