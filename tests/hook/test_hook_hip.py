"""The hook layer's HIP interposers, without an AMD GPU or ROCm: `hip_app` (built
by clang-22 for gfx90a and gfx942) links a stub libamdhip64.so that accepts
registrations, serves allocations from host memory and fails launches with
hipErrorNoDevice (100). Under the hook, the registry must hold the bundle's
kernels with kir's hashes, and launches and allocations must be seen."""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kir
from kir.hashing import kernel_hashes
from kir.hook import ALLOCATION_KINDS

# Every program here loads the stub runtime, never one LD_LIBRARY_PATH names (conftest).
pytestmark = pytest.mark.usefixtures("hostile_library_path")


@pytest.fixture(scope="module")
def hip_app(built):
    if "hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    return built["hip_app"]


def trace(kir_cli, app, *args):
    result = kir_cli("trace", "--json", *args, "--", app)
    assert result.returncode == 3, result.stderr
    return result, [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]


def static_hashes(app, target):
    hashes, errors = kernel_hashes(kir.open(app))
    assert not errors
    return {h.kernel: h.static.hex for h in hashes if h.target == target and h.code_kind == "code-object"}


def test_output_passes_through_and_no_static_runtime_warning(hip_app, kir_cli):
    bare = subprocess.run([hip_app], capture_output=True, text=True)
    result, _ = trace(kir_cli, hip_app)
    assert bare.returncode == 3
    assert [l for l in result.stdout.splitlines() if not l.startswith("{")] == bare.stdout.splitlines()
    assert result.stderr == bare.stderr == ""


def test_registry_holds_the_bundle_kernels_with_kir_hashes(hip_app, kir_cli):
    _, events = trace(kir_cli, hip_app)
    code_objects = [i for i in kir.open(hip_app).images if i.kind == "code-object"]
    assert [e["images"] for e in events if e["event"] == "register-fatbin"] == [len(code_objects)]
    first = code_objects[0]  # without KIR_HOOK_ARCH, the bundle's first code object
    kernels = {e["kernel"]: e for e in events if e["event"] == "register-kernel"}
    assert {name: k["params"] for name, k in kernels.items()} == {k.name: len(k.params) for k in first.kernels}
    static = static_hashes(hip_app, first.target)
    assert {name: k["static"] for name, k in kernels.items()} == static
    assert {e["name"]: e["size"] for e in events if e["event"] == "register-global"} == {"counter": 4}


def test_hook_arch_selects_the_code_object(hip_app, kir_cli):
    os.environ["KIR_HOOK_ARCH"] = "gfx942"
    try:
        _, events = trace(kir_cli, hip_app)
    finally:
        del os.environ["KIR_HOOK_ARCH"]
    static = static_hashes(hip_app, "gfx942")
    assert {e["kernel"]: e["static"] for e in events if e["event"] == "register-kernel"} == static


def test_launches_and_allocations(hip_app, kir_cli):
    result, events = trace(kir_cli, hip_app)
    printed = [int(l.split()[1]) for l in result.stdout.splitlines() if l.startswith("launch ")]
    launches = [e for e in events if e["event"] == "launch"]
    assert [l["result"] for l in launches] == printed == [100, 100]
    assert {l["api"] for l in launches} == {"hipLaunchKernel"}
    axpy, count = launches
    allocs = [e for e in events if e["event"] == "alloc"]
    assert [(a["size"], a["kind"]) for a in allocs] == [(4096, "device"), (512, "host-pinned")]
    # kir.hook's table for KIR_ALLOC_* names them as the layer does (hipMalloc: DEVICE, hipHostMalloc: HOST_PINNED).
    assert [a["kind"] for a in allocs] == [ALLOCATION_KINDS[1], ALLOCATION_KINDS[3]]
    assert [e["address"] for e in events if e["event"] == "free"] == [a["address"] for a in allocs]
    assert axpy["grid"] == [8, 1, 1] and axpy["block"] == [128, 1, 1]
    assert axpy["args"] == [hex(struct.unpack("<I", struct.pack("<f", 1.5))[0]), hex(allocs[0]["address"]),
                            hex(allocs[0]["address"]), hex(1024)]
    assert count["args"] == [hex(1 << 33)] and count["shared"] == 16


def test_exit_unregisters_the_fatbin(hip_app, kir_cli):
    """clang's module destructor calls __hipUnregisterFatBinary at exit: the layer
    reports it for the handle it registered, with its kernels still live then."""
    _, events = trace(kir_cli, hip_app)
    registered = [e for e in events if e["event"] == "register-fatbin"]
    unregistered = [e for e in events if e["event"] == "unregister-fatbin"]
    kernels = [e for e in events if e["event"] == "register-kernel"]
    assert [e["handle"] for e in unregistered] == [e["handle"] for e in registered]
    assert [e["kernels"] for e in unregistered] == [len(kernels)]
    assert events[-1]["event"] == "unregister-fatbin"  # after every launch and free


REGISTER_BUNDLE = r"""
import ctypes, json, struct, sys
import kir.hook
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the stub runtime, after the hook in lookup order
register = ctypes.CDLL(None).__hipRegisterFatBinary
register.restype, register.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
data = open(sys.argv[2], "rb").read()
bundle = ctypes.create_string_buffer(data, len(data))
wrapper = ctypes.create_string_buffer(struct.pack("<IIQQ", 0x48495046, 1, ctypes.addressof(bundle), 0), 24)
handle = register(ctypes.addressof(wrapper))
print(json.dumps({"handle": handle, "stats": kir.hook.stats()}))
"""


def test_a_damaged_bundle_is_counted_and_logged(hip_app, built, tmp_path, kir_cli):
    """hip.o's offload bundle with entry #1's size damaged, registered through the
    hooked (stub) runtime: one failure, logged with libkir's error for the entry
    (`kir inspect` of the same bytes says the same up to the bundle's end, which a
    bare address does not tell the layer)."""
    from elftools.elf.elffile import ELFFile
    with open(built["hip.o"], "rb") as f:
        data = bytearray(ELFFile(f).get_section_by_name(".hip_fatbin").data())
    assert data[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    first = 32 + 24 + struct.unpack_from("<Q", data, 32 + 16)[0]  # entry #1's header: after entry #0's id
    struct.pack_into("<Q", data, first + 8, 1 << 40)
    damaged = tmp_path / "bundle.bin"
    damaged.write_bytes(bytes(data))
    stub = next(built["hip_app"].parent.glob(".hip_app.work/libamdhip64.so"))
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    proc = subprocess.run([sys.executable, "-c", REGISTER_BUNDLE, str(stub), str(damaged)], capture_output=True,
                          text=True, env={**os.environ, "LD_PRELOAD": str(hook), "KIR_HOOK_LOG": "1"})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["stats"]["failures"] == 1 and seen["stats"]["fatbins"] == 1
    inspected = kir_cli("inspect", damaged)
    assert inspected.returncode == 2
    expected = inspected.stderr.split("bundle: ", 1)[1].split(" runs past the end of the data")[0]
    assert expected.startswith(f"bundle entry #1 at offset {first:#x} ('hipv4-amdgcn-amd-amdhsa--gfx90a')")
    assert re.match(f"kir-hook: error: HIP fatbin {seen['handle']:#x}: registered without its code: "
                    f"bundle at 0x[0-9a-f]+: bundle: {re.escape(expected)} runs past the end of the data",
                    proc.stderr), proc.stderr
    assert len(proc.stderr.splitlines()) == 1
