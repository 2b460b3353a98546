"""The stub CUDA runtime and driver (libcudart.so / libcuda.so.1 built here from tests/fixtures/stub_cuda: registrations
succeed, every launch that reaches them prints one line naming the entry point, the
function and its arguments), the app that launches the fixture kernel axpy through every
path the hook layer interposes, and the C hook clients of tests/hook/test_hook_override.py
(`rig`). Shared by the hook, JIT-client and kernel-pattern tests and benchmarks/launch_path.py."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kir
from build import rpath  # tests/support/build.py (conftest puts it on the path)

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"
AXPY = "_Z4axpyfPKfPfi"

# The C sources: tests/fixtures/stub_cuda/ (the headers next to them: build_stub_libraries
# copies them next to a variant written from these texts).
STUBS = Path(__file__).resolve().parents[1] / "fixtures" / "stub_cuda"
HEADERS = ("stub_common.h", "app_prelude.h")
STUB_COMMON = (STUBS / "stub_common.h").read_text()
STUB_RUNTIME = (STUBS / "runtime.c").read_text()
STUB_DRIVER = (STUBS / "driver.c").read_text()
APP_PRELUDE = (STUBS / "app_prelude.h").read_text()  # the apps' declarations, slurp(path) and the stub
QUIET = (STUBS / "quiet.h").read_text()
APP = (STUBS / "app.c").read_text()  # every launch path, one letter each
CLIENT = (STUBS / "client.c").read_text()  # NAME, CLAIM, V3, REPORT: -D


# The driver with a device: ordinal 0 of the current context, compute capability 9.0 (sm_90).
DEVICE_DRIVER = STUB_DRIVER.replace(
    "int cuDeviceGetAttribute(int* v, int a, int d) { (void)v; (void)a; (void)d; return 100; }",
    "int cuDeviceGetAttribute(int* v, int a, int d) { (void)d; *v = a == 75 ? 9 : 0; return 0; }\n"
    "int cuCtxGetDevice(int* d) { *d = 0; return 0; }")
assert DEVICE_DRIVER != STUB_DRIVER, "driver.c's cuDeviceGetAttribute changed: DEVICE_DRIVER replaces it"


def build_stub_libraries(d: Path, driver: str = STUB_DRIVER, quiet: bool = False, optimize: bool = False,
                         runtime: str = STUB_RUNTIME) -> None:
    """The stub runtime and driver as libcudart.so and libcuda.so.1 in `d` (the
    apps link them by those names); `quiet`: their printing compiled out (QUIET),
    for runs of thousands of launches; `optimize`: -O2 (the launch path timed)."""
    for header in HEADERS:
        shutil.copy(STUBS / header, d / header)
    (d / "rt.c").write_text(runtime)
    (d / "drv.c").write_text(driver)
    flags = ["-O2"] if optimize else []
    if quiet:
        (d / "quiet.h").write_text(QUIET)
        flags += ["-include", "quiet.h"]
    for source, name in (("rt.c", "libcudart.so"), ("drv.c", "libcuda.so.1")):
        subprocess.run(["gcc", "-Wall", *flags, "-shared", "-fPIC", source, f"-Wl,-soname,{name}", "-o", name],
                       check=True, cwd=d)


def make_rig(built, d: Path, driver: str = STUB_DRIVER):
    build_stub_libraries(d, driver)
    (d / "app.c").write_text(APP.replace("AXPY", AXPY))

    def cc(*args):
        subprocess.run(["gcc", "-Wall", *map(str, args)], check=True, cwd=d)

    cc("-shared", "-fPIC", STUBS / "proteus.c", "-o", "libproteus.so")
    cc("app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d), "-o", "app")
    for name, claim, v3, report in (("A", 1, 0, 1), ("B", 1, 0, 0), ("C", 0, 1, 0)):
        cc("-shared", "-fPIC", f"-I{INCLUDE}", f'-DNAME="{name}"', f"-DCLAIM={claim}", f"-DV3={v3}",
           f"-DREPORT={report}", STUBS / "client.c", "-o", f"lib{name}.so")
    return d, built["kernels.fatbin"], built["kernels_sm90.cubin"]


@pytest.fixture(scope="module")
def rig(built, tmp_path_factory):
    return make_rig(built, tmp_path_factory.mktemp("override"))


@pytest.fixture(scope="module")
def device_rig(built, tmp_path_factory):
    """The rig with DEVICE_DRIVER: the launch's device is known (ordinal 0, sm_90)."""
    return make_rig(built, tmp_path_factory.mktemp("override_device"), DEVICE_DRIVER)


def run(rig, launches, clients="ABC", log=False, proteus=False, **modes):
    d, fatbin, cubin = rig
    preload = f"{HOOK}:{d / 'libproteus.so'}" if proteus else str(HOOK)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": preload, "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": ":".join(str(d / f"lib{c}.so") for c in clients), **modes}
    if log:
        env["KIR_HOOK_LOG"] = "1"
    proc = subprocess.run([d / "app", fatbin, cubin, launches], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def lines(proc, prefix):
    return [l for l in proc.stdout.splitlines() if l.startswith(prefix)]
