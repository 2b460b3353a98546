"""Hook API 4: IR access from C — kir_hook_kernel_ir_count / kir_hook_kernel_ir in
the process, and kir_binary_kernel_ir_count / kir_binary_kernel_ir offline (kir.h).

The oracle is kir.ir (python/kir/ir.py: every module embedded in a binary's
device images, as `kir extract` writes them) on the same clang/nvcc-built
fixtures that carry the Proteus pass's `_jit_bitcode_*` globals
(tests/support/proteus_layout.py). No GPU: the apps register their fatbins with
the shared CUDA runtime, where a client reads the layer's registry."""
from __future__ import annotations

import ctypes
import hashlib
import subprocess
from pathlib import Path

import pytest

import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.ir import ir_modules

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"
LIBKIR = Path(kir.__file__).parent / "lib" / "libkir.so"

CLIENT = source("hook/hook_ir_client.c")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    d = tmp_path_factory.mktemp("irclient")
    (d / "client.c").write_text(CLIENT)
    subprocess.run(["gcc", "-Wall", "-shared", "-fPIC", f"-I{INCLUDE}", "client.c", "-o", "libirclient.so"],
                   check=True, cwd=d)
    return d / "libirclient.so"


def embedded(app: Path) -> dict[int, list[bytes]]:
    """image index -> the bitcode of the modules embedded in it, in image order (kir.ir)."""
    out: dict[int, list[bytes]] = {}
    for m in ir_modules(kir.open(app)):
        if m.embedded and not m.for_kernel:
            out.setdefault(m.image, []).append(m.bitcode)
    return out


@pytest.mark.parametrize("name", ["proteus_cuda_shared", "clang_proteus_app"])
def test_hook_ir_is_the_embedded_modules(built, client, tmp_path, name):
    if name not in built:
        pytest.skip("clang-22 not installed: the Proteus fixtures cannot be built")
    app = built[name]
    proc = subprocess.run([app], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "KIR_HOOK_CLIENTS": str(client),
                               "IR_DIR": str(tmp_path)})
    counts = {l.split()[1]: (int(l.split()[2]), int(l.split()[3])) for l in proc.stdout.splitlines()
              if l.startswith("ir ")}
    assert "ir-missing" not in proc.stdout
    # What the hook launches without a device: the sm_90 cubin holding each kernel.
    modules = embedded(app)
    expected = {}
    for image in kir.open(app).images:
        if image.kind == "cubin":
            for k in image.kernels:
                expected[k.name] = modules.get(image.index, [])
    assert {k: n for k, (n, _) in counts.items()} == {k: len(m) for k, m in expected.items()}
    assert all(past == 0 for _, past in counts.values())
    assert any(expected.values()) and (name != "proteus_cuda_shared" or not all(expected.values()))
    for kernel, mods in expected.items():
        got = [(tmp_path / f"{kernel}.{i}.bc").read_bytes() for i in range(len(mods))]
        assert got == mods, kernel


class Bytes(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


@pytest.fixture(scope="module")
def libkir():
    lib = ctypes.CDLL(str(LIBKIR))
    lib.kir_binary_open.restype = ctypes.c_void_p
    lib.kir_binary_open.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.kir_binary_close.argtypes = [ctypes.c_void_p]
    lib.kir_binary_kernel_ir_count.restype = ctypes.c_int64
    lib.kir_binary_kernel_ir_count.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    lib.kir_binary_kernel_ir.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                         ctypes.POINTER(Bytes)]
    lib.kir_last_error.restype = ctypes.c_char_p
    return lib


def offline_ir(libkir, app: Path) -> dict[tuple[int, str], list[bytes]]:
    handle = libkir.kir_binary_open(str(app).encode(), 0)
    assert handle, libkir.kir_last_error()
    try:
        out = {}
        for image in kir.open(app).images:
            if image.kind not in ("cubin", "ptx"):
                continue
            for k, kernel in enumerate(image.kernels):
                n = libkir.kir_binary_kernel_ir_count(handle, image.index, k)
                assert n >= 0, libkir.kir_last_error()
                mods = []
                for i in range(n):
                    b = Bytes()
                    assert libkir.kir_binary_kernel_ir(handle, image.index, k, i, ctypes.byref(b)) == 0
                    mods.append(ctypes.string_at(b.data, b.size))
                b = Bytes()
                assert libkir.kir_binary_kernel_ir(handle, image.index, k, n, ctypes.byref(b)) == -1
                assert b"out of range" in libkir.kir_last_error()
                out[(image.index, kernel.name)] = mods
        return out
    finally:
        libkir.kir_binary_close(handle)


def test_offline_ir_of_relocatable_code_is_every_unit(built, libkir):
    """proteus_cuda_rdc: two units device-linked; the linked cubin's kernels need
    both units' modules (in image order), each unit's PTX holds its own."""
    if "proteus_cuda_rdc" not in built:
        pytest.skip("clang-22 not installed: the Proteus fixtures cannot be built")
    app = built["proteus_cuda_rdc"]
    got = offline_ir(libkir, app)
    modules = embedded(app)
    binary = kir.open(app)
    linked = [i for i in binary.images if i.kind == "cubin" and i.index in modules]
    assert len(linked) == 1 and len(modules[linked[0].index]) == 2
    for k in linked[0].kernels:
        assert got[(linked[0].index, k.name)] == modules[linked[0].index]
    # The units' PTX (which kir.ir does not read) carries the same bytes, one unit each.
    unit_modules = sorted(hashlib.sha256(m).hexdigest() for m in modules[linked[0].index])
    ptx = [i for i in binary.images if i.kind == "ptx"]
    assert len(ptx) == 2
    from_ptx = sorted(hashlib.sha256(got[(i.index, i.kernels[0].name)][0]).hexdigest() for i in ptx)
    assert from_ptx == unit_modules
    assert all(len(got[(i.index, k.name)]) == 1 for i in ptx for k in i.kernels)
    # Images without embedded IR: none.
    assert all(got[(i.index, k.name)] == [] for i in binary.images if i.kind == "cubin"
               and i.index not in modules for k in i.kernels)


@pytest.mark.parametrize("name", ["proteus_cuda_shared", "clang_proteus_app"])
def test_offline_ir_matches_the_hook_s(built, libkir, name):
    if name not in built:
        pytest.skip("clang-22 not installed: the Proteus fixtures cannot be built")
    app = built[name]
    got = offline_ir(libkir, app)
    modules = embedded(app)
    for image in kir.open(app).images:
        if image.kind == "cubin":
            for k in image.kernels:
                assert got[(image.index, k.name)] == modules.get(image.index, [])


def test_offline_ir_bad_indices_are_errors(built, libkir):
    handle = libkir.kir_binary_open(str(built["kernels.fatbin"]).encode(), 0)
    try:
        assert libkir.kir_binary_kernel_ir_count(handle, 10_000, 0) == -1
        assert libkir.kir_last_error()
        n = len(kir.open(built["kernels.fatbin"]).images[0].kernels)
        assert libkir.kir_binary_kernel_ir_count(handle, 0, n) == -1
        assert b"kernel index" in libkir.kir_last_error()
        assert libkir.kir_binary_kernel_ir_count(handle, 0, 0) == 0  # no IR embedded: none
    finally:
        libkir.kir_binary_close(handle)
