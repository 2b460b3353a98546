"""HIP's driver-style API under the hook, on the suite's stub libamdhip64.so
(tests/fixtures/hip_stub_runtime.c: host memory, launches fail with hipErrorNoDevice):
modules loaded with hipModuleLoadData / hipModuleLoadDataEx / hipModuleLoad from an
AMDGPU code object, a plain offload bundle or a CCOB-compressed one are registered
with their code objects' kernels (kir's hashes) and globals, hipModuleGetFunction's
functions are the kernels hipModuleLaunchKernel / hipExtModuleLaunchKernel /
hipModuleLaunchCooperativeKernel launches report, hipModuleUnload retires them; the
runtime-API launch paths and every HIP allocation kind are seen."""
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
AXPY = "_Z4axpyfPKfPfi"


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
def images(built, stub, tmp_path_factory):
    """name -> (path of the image file, the code object launches use, its target)."""
    d = tmp_path_factory.mktemp("hip_images")
    out = {}
    for name, obj in (("bundle", "hip.o"), ("ccob-v2", "hip_ccob_v2.o"), ("ccob-v3", "hip_ccob_v3.o")):
        (d / name).write_bytes(bundle_of(built[obj]))
    first = next(i for i in kir.open(built["hip.o"]).images if i.kind == "code-object")
    (d / "code-object").write_bytes(first.read())
    for name in ("bundle", "ccob-v2", "ccob-v3", "code-object"):
        code = [i for i in kir.open(d / name).images if i.kind == "code-object"]
        assert code, name
        out[name] = (d / name, code, code[0].target)
    return out


MODULE_APP = Path(__file__).resolve().parents[1] / "fixtures" / "hook" / "hip_module_app.py"


def run_module_app(stub, image: Path, how="data", launch="module", **env):
    proc = subprocess.run([sys.executable, str(MODULE_APP), str(stub), str(image), how, launch],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_TRACE": "json", "KIR_HOOK_LOG": "1",
                               **env})
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith("{")]
    return json.loads(proc.stdout), events, [l for l in proc.stderr.splitlines() if not l.startswith("{")]


def elf_globals(code_object: bytes) -> dict[str, int]:
    """The device variables hipModuleGetGlobal finds, read with pyelftools: defined
    global objects, less the kernels' descriptors (NAME.kd)."""
    import io

    from elftools.elf.elffile import ELFFile
    symtab = ELFFile(io.BytesIO(code_object)).get_section_by_name(".symtab")
    return {s.name: s["st_size"] for s in symtab.iter_symbols()
            if s["st_info"]["type"] == "STT_OBJECT" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
            and s["st_shndx"] != "SHN_UNDEF" and not s.name.endswith(".kd")}


def hashes(image: Path, target: str):
    found, errors = kernel_hashes(kir.open(image))
    assert not errors
    return {h.kernel: h.static.hex for h in found if h.target == target and h.code_kind == "code-object"}


@pytest.mark.parametrize("kind", ["code-object", "bundle", "ccob-v2", "ccob-v3"])
def test_a_loaded_module_is_registered_with_its_code_object(stub, images, kind):
    path, code, target = images[kind]
    results, events, other = run_module_app(stub, path)
    assert results == {"load": 0, "get": 0, "launch": 100, "launch-extra": 100, "unload": 0}
    assert other == []  # no failure logged
    registered = [e for e in events if e["event"] == "register-fatbin"]
    assert [e["images"] for e in registered] == [len(code)]
    kernels = [e for e in events if e["event"] == "register-kernel"]
    assert [k["kernel"] for k in kernels] == [AXPY]  # looked up: registered
    assert kernels[0]["static"] == hashes(path, target)[AXPY]
    globals_ = {e["name"]: e["size"] for e in events if e["event"] == "register-global"}
    assert globals_ == elf_globals(code[0].read())
    assert {"counter": 4, "table": 256}.items() <= globals_.items()
    launches = [e for e in events if e["event"] == "launch"]
    assert [(l["api"], l["kernel"], l["grid"], l["block"], l["shared"], l["result"]) for l in launches] == [
        ("hipModuleLaunchKernel", AXPY, [8, 1, 1], [128, 1, 1], 0, 100),
        ("hipModuleLaunchKernel", AXPY, [8, 1, 1], [128, 1, 1], 16, 100)]
    a = "0x3fc00000"  # 1.5f
    # kernelParams and `extra`'s packed buffer (ended by HIP_LAUNCH_PARAM_END, 3) read alike
    assert launches[0]["args"] == launches[1]["args"] == [a, "0x1000", "0x2000", hex(1024)]
    unregistered = [e for e in events if e["event"] == "unregister-fatbin"]
    assert [(e["handle"], e["kernels"]) for e in unregistered] == [(registered[0]["handle"], 1)]


def test_hook_arch_selects_the_module_s_code_object(stub, images):
    path, code, _ = images["bundle"]
    targets = [c.target for c in code]
    assert targets[-1] != targets[0]
    _, events, other = run_module_app(stub, path, KIR_HOOK_ARCH=targets[-1].split(":")[0])
    assert other == []
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert kernel["static"] == hashes(path, targets[-1])[AXPY] != hashes(path, targets[0])[AXPY]


@pytest.mark.parametrize("how", ["data-ex", "file"])
def test_hip_module_load_data_ex_and_load_from_a_file(stub, images, how):
    path, code, target = images["ccob-v3"]
    results, events, other = run_module_app(stub, path, how=how)
    assert results["load"] == 0 and other == []
    assert [e["images"] for e in events if e["event"] == "register-fatbin"] == [len(code)]
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert kernel["static"] == hashes(path, target)[AXPY]


def test_ext_and_cooperative_module_launches(stub, images):
    path = images["code-object"][0]
    _, events, _ = run_module_app(stub, path, launch="ext")
    [ext] = [e for e in events if e["event"] == "launch"]
    assert (ext["api"], ext["kernel"], ext["grid"], ext["block"]) == (
        "hipExtModuleLaunchKernel", AXPY, [8, 1, 1], [128, 1, 1])
    assert ext["args"] == ["0x3fc00000", "0x1000", "0x2000", hex(1024)]
    _, events, _ = run_module_app(stub, path, launch="cooperative")
    [coop] = [e for e in events if e["event"] == "launch"]
    assert (coop["api"], coop["kernel"], coop["grid"]) == ("hipModuleLaunchCooperativeKernel", AXPY, [8, 1, 1])


def test_an_image_that_is_no_code_is_logged_and_the_load_passes_through(stub, tmp_path):
    """The stub loads anything that starts with ELF's magic: an x86 ELF (the stub itself)
    is loaded by it (result 0 passed through) and logged by the layer as not recorded with its code."""
    elf = tmp_path / "host.elf"
    elf.write_bytes(stub.read_bytes())
    results, events, other = run_module_app(stub, elf)
    assert results["load"] == 0 and results["launch"] == 100
    assert [e["images"] for e in events if e["event"] == "register-fatbin"] == [0]
    assert len(other) == 1 and "not recorded with its code" in other[0], other


RUNTIME_APP = Path(__file__).resolve().parents[1] / "fixtures" / "hook" / "hip_runtime_app.py"


def test_runtime_launch_paths_and_every_allocation_kind(stub, images):
    """hipExtLaunchKernel and hipLaunchCooperativeKernel launch by host stub as
    hipLaunchKernel does; hipMalloc, hipMallocAsync, hipMallocFromPoolAsync,
    hipExtMallocWithFlags, hipMallocPitch (pitch x height) are device memory,
    hipMallocManaged managed, hipHostMalloc pinned, a hipMemMap'ed range device memory
    until its hipMemUnmap; reservations and hipMemCreate alone are no allocation."""
    proc = subprocess.run([sys.executable, str(RUNTIME_APP), str(stub), str(images["bundle"][0])],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_TRACE": "json", "KIR_HOOK_LOG": "1"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    events = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith("{")]
    assert [l for l in proc.stderr.splitlines() if not l.startswith("{")] == []
    results = out["results"]
    assert (results["ext"], results["cooperative"]) == (100, 100)  # the stub: no device
    assert all(v == 0 for k, v in results.items() if k not in ("ext", "cooperative", "frees"))
    assert results["frees"] == [0] * 7
    launches = [e for e in events if e["event"] == "launch"]
    assert [(l["api"], l["kernel"], l["grid"], l["block"], l["shared"], l["result"]) for l in launches] == [
        ("hipExtLaunchKernel", AXPY, [4, 1, 1], [64, 1, 1], 32, 100),
        ("hipLaunchCooperativeKernel", AXPY, [2, 1, 1], [32, 1, 1], 0, 100)]
    assert launches[0]["args"] == ["0x3fc00000", "0x1000", "0x2000", hex(64)]
    addr = out["addresses"]
    expected = [(addr["malloc"], 1000, "device"), (addr["async"], 2000, "device"), (addr["pool"], 3000, "device"),
                (addr["managed"], 4000, "managed"), (addr["host"], 5000, "host-pinned"),
                (addr["flags"], 6000, "device"), (addr["pitch"], out["pitch"] * 7, "device"),
                (addr["reserve"], 1 << 21, "device")]
    assert out["pitch"] >= 100
    assert [(e["address"], e["size"], e["kind"]) for e in events if e["event"] == "alloc"] == expected
    freed = [e["address"] for e in events if e["event"] == "free"]
    assert freed == [addr[k] for k in ("reserve", "malloc", "async", "pool", "managed", "host", "flags", "pitch")]


# --- The real ROCm userspace (Debian's libamdhip64.so.5, ROCm 5.2) and a real AMD GPU ---------

REAL_HIP = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")


@pytest.mark.skipif(not REAL_HIP.exists(), reason="Debian's libamdhip64-5 not installed")
@pytest.mark.skipif(Path("/dev/kfd").exists(), reason="a machine with an AMD GPU: the calls succeed there")
def test_the_real_hip_runtime_s_errors_pass_through(images):
    """ROCm 5.2's real libamdhip64.so.5 on a machine without an AMD GPU: every module call
    fails (hipErrorInvalidDevice, 101) and the hook returns each result unchanged, registers
    nothing, reports the launches with their results and logs no failure."""
    path = images["bundle"][0]
    bare = subprocess.run([sys.executable, str(MODULE_APP), str(REAL_HIP), str(path), "data", "module"],
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0, bare.stderr
    results, events, other = run_module_app(REAL_HIP, path)
    assert results == json.loads(bare.stdout)
    assert results["load"] != 0 and set(results.values()) == {results["load"]}
    assert [e["event"] for e in events] == ["launch", "launch"]
    assert [e["result"] for e in events] == [results["launch"], results["launch-extra"]]
    assert other == []


def test_a_module_on_an_amd_gpu(built, tmp_path):
    """On an MI250X (gfx90a) or MI300A (gfx942): hip.o's code object for the device, loaded
    with the real runtime's hipModuleLoadData under the hook, is registered with kir's hash,
    its globals found through hipModuleGetGlobal at real device addresses; unloaded."""
    running.require_amd_gpu()
    agents = subprocess.run(["rocm_agent_enumerator"], capture_output=True, text=True).stdout.split()
    code = [i for i in kir.open(built["hip.o"]).images if i.kind == "code-object"]
    [image] = [i for i in code if i.target.split(":")[0] == next(a for a in agents if a != "gfx000")]
    path = tmp_path / "axpy.co"
    path.write_bytes(image.read())
    runtime = next(p for p in ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6") if _loads(p))
    results, events, other = run_module_app(runtime, path, launch="none")
    assert (results["load"], results["get"], results["unload"]) == (0, 0, 0) and other == []
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert kernel["static"] == hashes(path, image.target)[AXPY]
    assert {name: size for name, (size, _) in results["globals"].items()} == elf_globals(image.read())
    assert all(found for _, found in results["globals"].values())


def _loads(name: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({name!r})"],
                          capture_output=True).returncode == 0
