"""The hook layer (libkir_hook.so) and `kir trace`, without a GPU: the CUDA runtime
loads but finds no driver, so calls fail — registrations still happen, and
launches made with cudaLaunchKernel reach the hook with their arguments."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import hash_reference as ref
import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.hashing import kernel_hashes


def trace(kir_cli, built, *args, threads=0):
    result = kir_cli("trace", *args, "--", built["hook_app"], str(threads))
    assert result.returncode == 3, result.stderr  # the app's own exit status
    return result


def events(result):
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_app_output_and_status_pass_through(built, kir_cli):
    bare = subprocess.run([built["hook_app"]], capture_output=True, text=True)
    traced = trace(kir_cli, built, "--json")
    app_lines = [l for l in traced.stdout.splitlines() if not l.startswith("{")]
    # Only under the hook does the app find the Proteus ABI (a weak symbol) and use it.
    assert "proteus launch" not in bare.stdout
    assert [l for l in app_lines if not l.startswith("proteus ")] == bare.stdout.splitlines()
    assert traced.stderr == bare.stderr == "app stderr line\n"
    assert bare.returncode == 3


def test_registrations_match_the_binary(built, kir_cli):
    ev = events(trace(kir_cli, built, "--json"))
    kernels = {e["kernel"]: e for e in ev if e["event"] == "register-kernel"}
    binary = kir.open(built["hook_app"])
    image = max((i for i in binary.images if i.kind == "cubin"
                 and any(k.name == "_Z4axpyfPKfPfi" for k in i.kernels)), key=lambda i: i.entry.sm)
    assert set(kernels) == {k.name for k in image.kernels}
    for k in image.kernels:
        assert kernels[k.name]["params"] == len(k.params)
    globals_ = {e["name"]: e["size"] for e in ev if e["event"] == "register-global"}
    assert globals_ == {g.name: g.size for g in image.code.globals}
    # The translation unit's fatbin (v1 wrapper) is registered with all its images.
    # (The runtime's own prelinked v2 fatbin is not registered in a run without a driver.)
    tu = [c for c in binary.containers if image in c.images]
    assert [e["images"] for e in ev if e["event"] == "register-fatbin"] == [len(tu[0].images)]
    # ... and unregistered as the app exits, after everything else.
    registered = [e["handle"] for e in ev if e["event"] == "register-fatbin"]
    assert [e for e in ev if e["event"] == "unregister-fatbin"] == [
        {"event": "unregister-fatbin", "handle": registered[0], "kernels": len(kernels)}]
    assert ev[-1]["event"] == "unregister-fatbin"


def test_launches_carry_decoded_arguments_and_the_runtime_result(built, kir_cli):
    result = trace(kir_cli, built, "--json")
    printed = [int(l.split()[1]) for l in result.stdout.splitlines() if l.startswith("launch ")]
    launches = [e for e in events(result) if e["event"] == "launch"]
    assert [l["api"] for l in launches] == ["cudaLaunchKernel"] * 2 + ["__proteus_launch_kernel"]
    assert [l["result"] for l in launches[:2]] == printed
    axpy, with_struct, _ = launches
    assert axpy["kernel"] == "_Z4axpyfPKfPfi" and axpy["grid"] == [4, 1, 1] and axpy["block"] == [64, 1, 1]
    assert axpy["args"][0] == hex(struct.unpack("<I", struct.pack("<f", 2.5))[0])
    assert axpy["args"][3] == hex(256)
    assert with_struct["shared"] == 128
    assert with_struct["args"] == [struct.pack("<d3i4x", 1.5, 1, 2, 3).hex(), hex(1 << 40), hex(ord("z"))]


def test_launch_hashes_are_kir_hashes(built, kir_cli):
    launches = [e for e in events(trace(kir_cli, built, "--json")) if e["event"] == "launch"]
    hashes, errors = kernel_hashes(kir.open(built["hook_app"]))
    static = {h.kernel: h.static.hex for h in hashes if h.target == "sm_90" and h.code_kind == "cubin"}
    axpy = launches[0]
    assert axpy["static"] == static["_Z4axpyfPKfPfi"]
    # The two pointers as the app passed them: NULL without a driver, device addresses on a GPU.
    pointers = [struct.pack("<Q", int(axpy["args"][i], 16)) for i in (1, 2)]
    args = [struct.pack("<f", 2.5), *pointers, struct.pack("<i", 256)]
    assert axpy["identity"] == ref.launch_identity(axpy["static"], "sm_90", args, [4, 1, 1], [64, 1, 1], 0)
    # the launch with dynamic shared memory: its identity covers it
    with_struct = launches[1]
    struct_args = [struct.pack("<d3i4x", 1.5, 1, 2, 3), struct.pack("<Q", 1 << 40), b"z"]
    assert with_struct["identity"] == ref.launch_identity(
        with_struct["static"], "sm_90", struct_args, with_struct["grid"], with_struct["block"], 128)


def test_concurrent_launches_and_allocations(built, kir_cli):
    launches = [e for e in events(trace(kir_cli, built, "--json", threads=4)) if e["event"] == "launch"]
    assert len(launches) == 3 + 4 * 100
    assert sorted(int(l["args"][3], 16) for l in launches[3:]) == sorted(list(range(100)) * 4)


def test_proteus_abi_launch_is_traced_once_with_the_proteus_result(built, kir_cli):
    result = trace(kir_cli, built, "--json")
    printed = [int(l.split()[2]) for l in result.stdout.splitlines() if l.startswith("proteus launch ")]
    proteus = [e for e in events(result) if e["event"] == "launch" and e["api"] == "__proteus_launch_kernel"]
    assert len(proteus) == 1 and [proteus[0]["result"]] == printed
    # Forwarded to cudaLaunchKernel inside the hook, which must not report it a second time.
    assert proteus[0]["grid"] == [2, 1, 1] and proteus[0]["block"] == [128, 1, 1]
    assert proteus[0]["kernel"] == "_Z4axpyfPKfPfi" and proteus[0]["args"][3] == hex(256)


def test_kernel_filter_and_text_format(built, kir_cli):
    result = trace(kir_cli, built, "--kernels", "with_struct")
    lines = [l for l in result.stdout.splitlines() if l.startswith("kir-trace")]
    assert [l.split()[1] for l in lines if "launch" in l.split()[1]] == ["launch"]
    assert any(l.startswith("kir-trace launch with_struct(Params, long long, char)") for l in lines)


def test_kernel_filter_matches_the_name_in_the_recorders_dialect(built, kir_cli):
    # The tracing client filters (kir's matcher, as the recorder and every command:
    # kir.kernel_pattern), on the kernel's names, not on the line: '^' anchors at the demangled
    # name's start; a POSIX class is POSIX's and RE2's (Python's re would read '[[:alpha:]]' as
    # a set of ':alph' then ']').
    for pattern in ("^with_struct\\(", "^[[:alpha:]]+_struct"):
        events_ = events(trace(kir_cli, built, "--json", "--kernels", pattern))
        kernels = {e["kernel"] for e in events_ if e["event"] in ("launch", "register-kernel")}
        assert kernels and all("with_struct" in k for k in kernels), (pattern, kernels)
        assert any(e["event"] == "launch" for e in events_)


CLIENT = source("hook/hook_client.c")


def test_client_loaded_from_the_environment(built, tmp_path):
    source = tmp_path / "client.c"
    source.write_text(CLIENT)
    include = Path(kir.__file__).parent / "include"
    library = tmp_path / "libclient.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", include, source, "-o", library], check=True)
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    report = tmp_path / "report.txt"
    proc = subprocess.run([built["hook_app"], "2"], capture_output=True, text=True,
                          env={"LD_PRELOAD": str(hook), "KIR_HOOK_CLIENTS": str(library),
                               "CLIENT_REPORT": str(report), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 3
    assert report.read_text().split() == ["2", str(3 + 2 * 100)]


def test_static_runtime_is_not_warned_about(built, kir_cli):
    """x86-64: the hook meets a static runtime at the driver (tests/hook/test_hook_static.py)."""
    result = kir_cli("trace", "--", built["app"])
    assert "statically" not in result.stderr


def test_no_static_runtime_warning_for_a_driver_api_app(built, kir_cli):
    """A host-only app that dlopens the driver has no runtime to warn about."""
    result = kir_cli("trace", "--", built["driver_app"], "/nonexistent.cubin")
    assert result.returncode != 0  # no driver here, or no cubin to load on a GPU machine
    assert "statically" not in result.stderr


QUERY = r"""
import ctypes, json, sys
import kir.hook
before = kir.hook.active() and len(kir.hook.kernels())
ctypes.CDLL(sys.argv[1])  # its constructor registers its fatbin with the (hooked) runtime
kir.hook.track_allocation(0x7f0000001000, 4096, "managed")
tagged = [kir.hook.tag_allocation(0x7f0000001800, 0xfeed), kir.hook.tag_allocation(0x7f0000002000, 1)]
print(json.dumps({
    "before": before,
    "kernels": [[k.name, k.static_hash, list(k.param_offsets), list(k.param_sizes)] for k in kir.hook.kernels()],
    "unloaded": [k.unloaded for k in kir.hook.kernels()],
    "inside": vars(kir.hook.find_allocation(0x7f0000001fff)),
    "outside": kir.hook.find_allocation(0x7f0000002000),
    "stats": kir.hook.stats(),
    "tagged": tagged,
    "globals": [[g.name, g.size] for g in kir.hook.globals_()],
    "resolved": [kir.hook.global_device_address(g.host_address) for g in kir.hook.globals_()],
}))
"""


def test_python_queries_the_registry_from_inside_the_process(built, tmp_path):
    library = built["libkernels_shared_runtime.so"]
    hook = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    proc = subprocess.run([sys.executable, "-c", QUERY, str(library)], capture_output=True, text=True,
                          env={**os.environ, "LD_PRELOAD": str(hook)})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["before"] == 0
    # The hook picks the highest-architecture cubin: its kernels, layouts and kir hashes.
    image = max((i for i in kir.open(library).images if i.kind == "cubin"
                 and any(k.name == "_Z4axpyfPKfPfi" for k in i.kernels)), key=lambda i: i.entry.sm)
    hashes, _ = kernel_hashes(kir.open(library))
    static = {h.kernel: h.static.hex for h in hashes if h.target == image.target and h.code_kind == "cubin"}
    expected = sorted([k.name, static[k.name], [p.offset for p in k.params], [p.size for p in k.params]]
                      for k in image.kernels)
    assert sorted(seen["kernels"]) == expected
    assert seen["inside"] == {"address": 0x7f0000001000, "size": 4096, "kind": "managed", "tag": 0xfeed}
    assert seen["tagged"] == [True, False]  # the second address is one past the end
    assert sorted(seen["globals"]) == sorted([g.name, g.size] for g in image.code.globals)
    if not Path("/dev/nvidiactl").exists():  # no driver: resolving fails cleanly (test_hook_gpu resolves)
        assert seen["resolved"] == [0] * len(seen["globals"])
    assert seen["outside"] is None
    assert seen["stats"]["kernels"] == len(expected) and seen["stats"]["live_allocations"] == 1
    assert seen["stats"]["failures"] == 0 and seen["stats"]["unregistered"] == 0
    assert seen["unloaded"] == [False] * len(expected)


def test_python_query_outside_the_hook_says_so():
    proc = subprocess.run([sys.executable, "-c", "import kir.hook; print(kir.hook.active()); kir.hook.kernels()"],
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "False"
    assert "the kir hook layer is not loaded in this process" in proc.stderr


def test_registry_links_proteus_embedded_ir(built, kir_cli):
    """proteus_cuda_shared embeds Proteus IR (`_jit_bitcode_*`) in one translation
    unit's cubin: that unit's kernel carries those bytes, the other unit's none."""
    if "proteus_cuda_shared" not in built:
        pytest.skip("clang-22 not installed: the Proteus fixture cannot be built")
    app = built["proteus_cuda_shared"]
    expected = {}
    for image in kir.open(app).images:
        if image.kind == "cubin":
            modules = [m for m in image.code.ir if not m.kernel]
            for k in image.kernels:
                expected[k.name] = len(modules[0].bitcode) if modules else 0
    assert sorted(set(expected.values()))[0] == 0 and max(expected.values()) > 0  # both cases present
    result = kir_cli("trace", "--json", "--", app)
    registered = {e["kernel"]: e["ir"] for e in events(result) if e["event"] == "register-kernel"}
    assert registered == expected
