"""The reference JIT client (libkir_jit.so) over the stub runtime and driver (stub_cuda):
a driver with a device and device memory reads, the app with its kernel's first argument
(`float a`) registered as a runtime constant through the Proteus ABI (`rig`), the JIT key the
client must compute, and `run_app`. Shared by the JIT-client, replay, tune and cache-trust tests."""
from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

import kir
import stub_cuda as override
from build import rpath  # tests/support/build.py
from kir import jit
from kir.hashing import jit_key, kernel_hashes
from kir.jit.client import client_environment

JIT_CLIENT = Path(kir.__file__).parent / "lib" / "libkir_jit.so"
F32 = 11  # kir_arg_type


# A driver with a device (sm_90) and device memory reads, for the client; with
# $KIR_STUB_READS set, each read's size is appended to that file (one line each).
DRIVER = override.DEVICE_DRIVER + (
    "\nint cuMemcpyDtoH_v2(void* out, unsigned long long from, size_t n) {\n"
    "  const char* reads = getenv(\"KIR_STUB_READS\");\n"
    "  FILE* f = reads ? fopen(reads, \"a\") : 0;\n"
    "  if (f) { fprintf(f, \"%zu\\n\", n); fclose(f); }\n"
    "  memcpy(out, (void*)from, n); return 0;\n}\n")


# The app registers `a` (position 0, Proteus FLOAT = 5) as the pass would.
APP = override.APP.replace(
    '  __cudaRegisterFunction(h, &axpy_stub, (char*)"AXPY", "AXPY", -1, 0, 0, 0, 0, 0);\n',
    '  __cudaRegisterFunction(h, &axpy_stub, (char*)"AXPY", "AXPY", -1, 0, 0, 0, 0, 0);\n'
    '  void* (*scalar)(int, int) = (void* (*)(int, int))dlsym(RTLD_DEFAULT, "__proteus_create_runtime_constant_info_scalar");\n'
    '  void (*reg)(void*, void*, char*, void**, int) =\n'
    '      (void (*)(void*, void*, char*, void**, int))dlsym(RTLD_DEFAULT, "__proteus_register_function");\n'
    '  void* infos[1] = {scalar(5, 0)};\n'
    '  reg(h, &axpy_stub, (char*)"AXPY", infos, 1);\n')


@pytest.fixture(scope="module")
def rig(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("jitclient")
    override.build_stub_libraries(d, DRIVER)
    (d / "app.c").write_text(APP.replace("AXPY", override.AXPY))

    def cc(*args):
        subprocess.run(["gcc", "-Wall", *map(str, args)], check=True, cwd=d)

    cc("app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d), "-o", "app")
    fatbin, cubin = built["kernels.fatbin"], built["kernels_sm90.cubin"]
    hashes, _ = kernel_hashes(kir.open(fatbin))
    static = next(h.static.hex for h in hashes
                  if h.kernel == override.AXPY and h.target == "sm_90" and h.code_kind == "cubin")
    return d, fatbin, cubin, static


def key_for(static: str, a: float, options: jit.Options | None = None) -> str:
    # The app launches with 16 bytes of dynamic shared memory: part of the key.
    return jit_key(static, "sm_90", [(1, F32, struct.pack("<f", a))], shared_bytes=16,
                   config=(options or jit.Options()).config())


def run_app(rig, cache: Path, launches: str, tmp_path: Path, env_extra=None, options=None, defaults=False):
    d, fatbin, cubin, _ = rig
    stats = tmp_path / "stats.json"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90",
           **client_environment(cache, options, stats=stats), **(env_extra or {})}
    if defaults:
        del env["KIR_JIT_CONFIG"]  # the client's built-in defaults must be Options()'s
    proc = subprocess.run([d / "app", fatbin, cubin, launches], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads(stats.read_text())


def stub_lines(proc):
    return [l for l in proc.stdout.splitlines() if l.startswith("stub ")]
