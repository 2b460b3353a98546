"""HIP entry points beyond the first registration, launch and allocation paths (issue 25
§1; docs/hip.md): every pinned host allocation (hipHostAlloc, hipExtHostAlloc,
hipMallocHost, hipMemAllocHost; hipFreeHost), the per-thread-default-stream launches
(hipLaunchKernel_spt — what clang's <<<...>>> lowers to under
-fgpu-default-stream=per-thread — and hipLaunchCooperativeKernel_spt), hipGetProcAddress
and lookups of libamdhip64 by handle handing out the layer's interposers, ROCm 7.x's
library API (hipLibraryLoadData, hipLibraryLoadFromFile, hipLibraryGetKernel,
hipKernelGetFunction, hipLibraryUnload), kir_hook_kernel_code's bytes for HIP
registrations, and registrations of CCOB-compressed bundles. On the suite's stub
libamdhip64.so (tests/fixtures/hip_stub_runtime.c: host memory, launches fail with
hipErrorNoDevice) and, for the entry points ROCm 5.2 has, on Debian's real libamdhip64.so.5
without a GPU (every result passed through untouched)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kir
import running  # tests/support
from kir.hashing import kernel_hashes

pytestmark = pytest.mark.usefixtures("hostile_library_path")

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ENTRY_APP = FIXTURES / "hook" / "hip_entry_app.py"
MODULE_APP = FIXTURES / "hook" / "hip_module_app.py"
KERNEL_CODE_APP = FIXTURES / "hook" / "hip_kernel_code_app.py"
REAL_HIP = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")
AXPY = "_Z4axpyfPKfPfi"
A = "0x3fc00000"  # 1.5f


def bundle_of(obj: Path) -> bytes:
    from elftools.elf.elffile import ELFFile
    with open(obj, "rb") as f:
        return ELFFile(f).get_section_by_name(".hip_fatbin").data()


@pytest.fixture(scope="module")
def stub(built):
    if "hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP fixtures cannot be built")
    return next(built["hip_app"].parent.glob(".hip_app.work/libamdhip64.so"))


@pytest.fixture(scope="module")
def bundles(built, tmp_path_factory):
    """name -> the offload bundle file of hip.o (plain) and hip_ccob_v2.o / v3.o (compressed)."""
    d = tmp_path_factory.mktemp("hip_bundles")
    out = {}
    for name, obj in (("bundle", "hip.o"), ("ccob-v2", "hip_ccob_v2.o"), ("ccob-v3", "hip_ccob_v3.o")):
        (d / name).write_bytes(bundle_of(built[obj]))
        out[name] = d / name
    assert out["ccob-v3"].read_bytes()[:4] == b"CCOB" and out["bundle"].read_bytes()[:4] == b"__CL"
    return out


def run(script: Path, *args, hooked=True, **env):
    environment = {**os.environ, **env}
    if hooked:
        environment.update(LD_PRELOAD=str(HOOK), KIR_TRACE="json", KIR_HOOK_LOG="1")
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=environment)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith("{")]
    other = [l for l in proc.stderr.splitlines() if not l.startswith("{")]
    return json.loads(proc.stdout), events, other


def code_objects(path: Path):
    return [i for i in kir.open(path).images if i.kind == "code-object"]


def static_hashes(path: Path, target: str) -> dict[str, str]:
    found, errors = kernel_hashes(kir.open(path))
    assert not errors
    return {h.kernel: h.static.hex for h in found if h.target == target and h.code_kind == "code-object"}


# --- 1. Pinned host memory of every spelling ------------------------------------------------

def test_every_pinned_host_allocation_is_tracked_until_its_free(stub):
    out, events, other = run(ENTRY_APP, stub, "host")
    assert other == []
    assert set(out["results"].values()) == {0} and out["frees"] == [0, 0, 0, 0]
    addr = out["addresses"]
    allocs = [(e["address"], e["size"], e["kind"]) for e in events if e["event"] == "alloc"]
    assert allocs == [(addr["host-alloc"], 1100, "host-pinned"), (addr["malloc-host"], 1300, "host-pinned"),
                      (addr["mem-alloc-host"], 1400, "host-pinned"), (addr["ext-host-alloc"], 1200, "host-pinned")]
    assert [e["address"] for e in events if e["event"] == "free"] == [
        addr[k] for k in ("host-alloc", "malloc-host", "mem-alloc-host", "ext-host-alloc")]


# --- 2. Per-thread default stream, hipGetProcAddress, lookups by handle ----------------------

def test_clang_s_per_thread_stream_launch_is_seen(built, kir_cli):
    """hip_spt_app's <<<...>>> launch is its stub's call of hipLaunchKernel_spt (clang-22,
    -fgpu-default-stream=per-thread); reported with the configuration pushed at the call."""
    app = built["hip_spt_app"]
    bare = subprocess.run([app], capture_output=True, text=True)
    result = kir_cli("trace", "--json", "--", app)
    assert bare.returncode == result.returncode == 3, result.stderr
    assert [l for l in result.stdout.splitlines() if not l.startswith("{")] == bare.stdout.splitlines()
    events = [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]
    [fill] = [e["kernel"] for e in events if e["event"] == "register-kernel"]
    launches = [e for e in events if e["event"] == "launch"]
    assert [(l["api"], l["kernel"], l["grid"], l["block"], l["shared"], l["result"]) for l in launches] == [
        ("hipLaunchKernel_spt", fill, [2, 1, 1], [32, 1, 1], 8, 100),
        ("hipLaunchCooperativeKernel_spt", fill, [4, 1, 1], [16, 1, 1], 0, 100)]
    assert launches[0]["args"] == ["0x1000", "0x7"] and launches[1]["args"] == ["0x1000", "0x9"]


def test_spt_launches_of_a_registered_kernel(stub, bundles):
    out, events, other = run(ENTRY_APP, stub, "spt", bundles["bundle"])
    assert other == [] and out["results"] == {"spt": 100, "cooperative-spt": 100}
    launches = [e for e in events if e["event"] == "launch"]
    assert [(l["api"], l["kernel"], l["grid"], l["block"], l["shared"]) for l in launches] == [
        ("hipLaunchKernel_spt", AXPY, [4, 1, 1], [64, 1, 1], 24),
        ("hipLaunchCooperativeKernel_spt", AXPY, [2, 1, 1], [32, 1, 1], 0)]
    assert launches[0]["args"] == [A, "0x1000", "0x2000", hex(64)]


def test_hip_get_proc_address_and_lookups_by_handle_hand_out_the_layer_s(stub):
    """ROCm/clr's hipGetProcAddress answers with its own functions (dlsym of itself, as the
    stub's): the layer's hipGetProcAddress replaces each it interposes, itself included;
    a dlsym of libamdhip64 by handle gets the same; names it does not interpose keep the
    runtime's answer. An allocation made through either answer is seen."""
    out, events, other = run(ENTRY_APP, stub, "proc")
    assert other == []
    found = out["found"]
    for name in ("hipMalloc", "hipLaunchKernel", "hipGetProcAddress"):
        f = found[name]
        assert (f["result"], f["status"]) == (0, 0), name
        assert f["pfn"] == f["by-handle"] == f["hook"] != None, name  # noqa: E711
    mem_create = found["hipMemCreate"]
    assert mem_create["hook"] is None and mem_create["pfn"] == mem_create["by-handle"] != None  # noqa: E711
    assert [r for r, _ in out["malloc"].values()] == [0, 0]
    allocs = [(e["address"], e["size"]) for e in events if e["event"] == "alloc"]
    assert allocs == [(out["malloc"]["pfn"][1], 1500), (out["malloc"]["by-handle"][1], 1600)]


def test_without_the_hook_the_runtime_s_own_functions_are_handed_out(stub):
    """The control: the same lookups without the layer answer with the stub's functions."""
    out, _, _ = run(ENTRY_APP, stub, "proc", hooked=False)
    for f in out["found"].values():
        assert f["hook"] is None and f["pfn"] == f["by-handle"] != None  # noqa: E711


# --- 3. ROCm 7.x's libraries -----------------------------------------------------------------

@pytest.mark.parametrize("how", ["library", "library-file"])
@pytest.mark.parametrize("kind", ["bundle", "ccob-v3"])
def test_a_library_is_registered_and_its_kernel_launches_are_seen(stub, bundles, how, kind):
    path = bundles[kind]
    results, events, other = run(MODULE_APP, stub, path, how, "module")
    assert other == []
    assert results == {"load": 0, "get": 0, "launch": 100, "launch-extra": 100, "unload": 0}
    [registered] = [e for e in events if e["event"] == "register-fatbin"]
    code = code_objects(path)
    assert registered["images"] == len(code)
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert (kernel["kernel"], kernel["static"]) == (AXPY, static_hashes(path, code[0].target)[AXPY])
    assert [e for e in events if e["event"] == "register-global"] == []  # a library is no module
    launches = [e for e in events if e["event"] == "launch"]
    assert [(l["api"], l["kernel"], l["shared"]) for l in launches] == [
        ("hipModuleLaunchKernel", AXPY, 0), ("hipModuleLaunchKernel", AXPY, 16)]
    assert launches[0]["args"] == launches[1]["args"] == [A, "0x1000", "0x2000", hex(1024)]
    assert [(e["handle"], e["kernels"]) for e in events if e["event"] == "unregister-fatbin"] == [
        (registered["handle"], 1)]


# --- 4. kir_hook_kernel_code for HIP registrations, compressed ones included -------------------

@pytest.mark.parametrize("kind", ["bundle", "ccob-v2", "ccob-v3"])
@pytest.mark.parametrize("arch", [None, "gfx942"])
def test_kernel_code_of_a_registration_is_its_code_object(stub, bundles, kind, arch):
    """A registration of a plain or CCOB-compressed bundle through __hipRegisterFatBinary:
    its kernels carry kir's offline hashes, and kir_hook_kernel_code(KIR_CODE_LAUNCHED)
    returns the bytes of the code object launches use (KIR_HOOK_ARCH's, else the first),
    kind "code-object", its target as arch — equal to `kir.open`'s code object."""
    env = {"KIR_HOOK_ARCH": arch} if arch else {}
    out, events, other = run(KERNEL_CODE_APP, stub, bundles[kind], "register", **env)
    assert other == []
    code = code_objects(bundles[kind])
    chosen = next(c for c in code if arch is None or c.target.split(":")[0] == arch)
    [registered] = [e for e in events if e["event"] == "register-fatbin"]
    assert registered["images"] == len(code) == 2
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert kernel["static"] == static_hashes(bundles[kind], chosen.target)[AXPY]
    assert out["code"]["kind"] == "code-object" and out["code"]["arch"] == chosen.target
    assert bytes.fromhex(out["code"]["bytes"]) == chosen.read()
    assert out["after-unregister"] is False  # the registration's bytes go with it


def test_kernel_code_of_a_loaded_module(stub, bundles):
    out, _, other = run(KERNEL_CODE_APP, stub, bundles["ccob-v2"], "module")
    assert other == []
    first = code_objects(bundles["ccob-v2"])[0]
    assert (out["code"]["kind"], out["code"]["arch"]) == ("code-object", first.target)
    assert bytes.fromhex(out["code"]["bytes"]) == first.read()


# --- The real ROCm 5.2 runtime, no GPU: the new entry points it has pass every result through -----

@pytest.mark.skipif(not REAL_HIP.exists(), reason="Debian's libamdhip64-5 not installed")
@pytest.mark.skipif(Path("/dev/kfd").exists(), reason="a machine with an AMD GPU: the calls succeed there")
@pytest.mark.parametrize("mode", ["host", "spt"])
def test_the_real_5_2_runtime_s_results_pass_through(bundles, mode):
    """ROCm 5.2 exports hipHostAlloc, hipMallocHost, hipMemAllocHost, hipFreeHost,
    hipLaunchKernel_spt and hipLaunchCooperativeKernel_spt (not hipExtHostAlloc,
    hipGetProcAddress or the library API): without a device each fails, and under the
    hook each returns exactly what it returns without; launches are reported with it."""
    args = [REAL_HIP, mode] + ([bundles["bundle"]] if mode == "spt" else [])
    bare, _, _ = run(ENTRY_APP, *args, hooked=False)
    hooked, events, other = run(ENTRY_APP, *args)
    assert hooked["results"] == bare["results"]
    assert hooked.get("frees") == bare.get("frees")
    assert "ext-host-alloc" not in hooked["results"]  # 5.2 has none
    assert set(hooked["results"].values()) - {0}, "the real runtime succeeded without a device"
    assert other == []
    launches = [e for e in events if e["event"] == "launch"]
    if mode == "spt":
        assert [(l["api"], l["result"]) for l in launches] == [
            ("hipLaunchKernel_spt", hooked["results"]["spt"]),
            ("hipLaunchCooperativeKernel_spt", hooked["results"]["cooperative-spt"])]
    else:
        failed = [k for k, v in hooked["results"].items() if v != 0]
        allocs = [e for e in events if e["event"] == "alloc"]
        assert len(allocs) == len(hooked["results"]) - len(failed)  # only successful allocations are tracked


# --- A real AMD GPU (MI250X, MI300A): written here, skipped without one (docs/hip.md) -----------

def test_on_an_amd_gpu_pinned_host_memory_and_registered_code(bundles):
    """The real runtime on a device: every pinned host allocation succeeds and is tracked
    host-pinned until its free; a CCOB registration's kernel code is its code object.
    (No launch: the apps' kernel arguments are not device memory.)"""
    running.require_amd_gpu()
    library = running.real_hip_library()
    out, events, other = run(ENTRY_APP, library, "host")
    assert other == [] and set(out["results"].values()) == {0} and set(out["frees"]) == {0}
    sizes = {"host-alloc": 1100, "malloc-host": 1300, "mem-alloc-host": 1400, "ext-host-alloc": 1200}
    assert [(e["address"], e["size"], e["kind"]) for e in events if e["event"] == "alloc"] == [
        (out["addresses"][k], sizes[k], "host-pinned") for k in out["results"]]
    out, _, other = run(KERNEL_CODE_APP, library, bundles["ccob-v3"], "register")
    assert other == []
    assert bytes.fromhex(out["code"]["bytes"]) == code_objects(bundles["ccob-v3"])[0].read()
