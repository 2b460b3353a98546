"""Hook API 4 (kir/hooks.h): the launch override, without a GPU.

A C program registers a real fatbin (tests/fixtures kernels.cu, built by nvcc)
with the CUDA runtime and loads the same kernels' sm_90 cubin through the
driver, then launches through every path the layer interposes. The runtime and
the driver are stubs written here (libcudart.so / libcuda.so.1): registrations
succeed, and every launch that reaches them prints one line naming the entry
point, the function and the arguments it got — so a test sees exactly what ran.
Clients are C libraries loaded through KIR_HOOK_CLIENTS; each prints what the
layer told it."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.errors import KirError
from stub_cuda import AXPY, HOOK, device_rig, lines, rig, run  # noqa: F401  (rig, device_rig: fixtures)

# The stub runtimes are found whatever LD_LIBRARY_PATH says (a GPU machine names the
# real driver's directory there): the programs carry DT_RPATH (issue 21, item 16).
pytestmark = pytest.mark.usefixtures("hostile_library_path")

ALL_PATHS = "rpcdxgPkKe"


def test_without_a_claim_every_launch_reaches_the_runtime(rig):
    proc = run(rig, ALL_PATHS)
    stub = lines(proc, "stub ")
    assert [l.split()[1] for l in stub] == ["cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                                           "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                                           "cuLaunchKernel", "cudaLaunchKernel", "__cudaLaunchKernel",
                                           "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC"]
    assert all(f"f={AXPY}" in l for l in stub if l.startswith("stub cuLaunch"))
    completed = lines(proc, "A completed")
    assert len(completed) == len(ALL_PATHS)
    assert all("outcome=0 claimed_by=-1 id=0:0" in l for l in completed)
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=0 failures=0"]


def test_handled_launches_reach_nothing(rig):
    proc = run(rig, ALL_PATHS, A_MODE="handled")
    assert lines(proc, "stub ") == []
    assert lines(proc, "app ") == [f"app {c} returned 77" for c in ALL_PATHS]
    apis = ["cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
            "cuLaunchKernelEx", "cuLaunchKernel", "__proteus_launch_kernel", "__cudaLaunchKernel",
            "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC"]
    # The claimer was asked about the registered kernel; every client saw launch_begin
    # (already knowing the outcome) and launch_completed with what happened.
    assert lines(proc, "A asked") == [f"A asked {api} kernel={AXPY} sized=1" for api in apis]
    for name in "AB":
        assert lines(proc, f"{name} begin") == [f"{name} begin {api} outcome=1 claimed_by=0" for api in apis]
        assert lines(proc, f"{name} completed") == [
            f"{name} completed {api} result=77 outcome=1 claimed_by=0 id=1d:2e" for api in apis]
    assert lines(proc, "A stats") == [f"A stats handled={len(apis)} substituted=0 loads=0 substitute_failures=0 "
                                      "failures=0"]


def test_first_claimer_wins_and_a_v3_client_is_unaffected(rig):
    proc = run(rig, "rd", A_MODE="none", B_MODE="handled")
    assert lines(proc, "A asked") == []  # A declined
    assert len(lines(proc, "B asked")) == 2
    assert lines(proc, "A completed")[0].endswith("result=77 outcome=1 claimed_by=1 id=1d:2e")
    # A claims: B is never asked. C's struct ends before launch_override (the poison
    # after it is never called) and it sees the launches as a v3 client would.
    proc = run(rig, "rd", A_MODE="handled", B_MODE="handled")
    assert lines(proc, "B asked") == []
    assert lines(proc, "C begin") == ["C begin cudaLaunchKernel outcome=-9 claimed_by=-9",
                                      "C begin cuLaunchKernel outcome=-9 claimed_by=-9"]
    assert lines(proc, "C completed") == ["C completed cudaLaunchKernel result=77",
                                          "C completed cuLaunchKernel result=77"]
    assert "POISON" not in proc.stdout


def test_a_claim_bypasses_the_proteus_runtime(rig):
    """With Proteus loaded, __proteus_launch_kernel goes to it — unless a client claims."""
    plain = run(rig, "P", proteus=True)
    assert [l.split()[1] for l in lines(plain, "stub ")] == ["__proteus_launch_kernel"]
    claimed = run(rig, "P", proteus=True, A_MODE="function")
    assert lines(claimed, "stub ") == ["stub cuLaunchKernel f=0xf00d grid=4 block=32 shared=16 stream=0x5 a=2.5"]


def test_kir_trace_names_the_claim(rig):
    """The trace client (KIR_TRACE) prints who claimed a launch and what ran."""
    import json
    proc = run(rig, "rd", A_MODE="function", KIR_TRACE="json")
    launches = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith('{"event":"launch"')]
    assert [(e["api"], e["outcome"], e["substitute"]) for e in launches] == [
        ("cudaLaunchKernel", "substituted", "000000000000001d000000000000002e"),
        ("cuLaunchKernel", "substituted", "000000000000001d000000000000002e")]
    assert len({e["claimed_by"] for e in launches}) == 1
    plain = run(rig, "r", KIR_TRACE="json")
    assert "claimed_by" not in plain.stderr and '"event":"launch"' in plain.stderr


def test_a_function_substitute_runs_with_the_app_s_configuration(rig):
    proc = run(rig, ALL_PATHS, A_MODE="function")
    # Never the runtime's launch; the driver launches 0xf00d with the app's grid,
    # block, dynamic shared memory, stream and arguments (a = 2.5, 3.5, ...).
    stub = lines(proc, "stub ")
    expected_api = ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchCooperativeKernel", "cuLaunchKernel",
                    "cuLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel_ptsz",
                    "cuLaunchKernelEx"]
    assert stub == [f"stub {api} f=0xf00d grid=4 block=32 shared=16 stream=0x5 a={2.5 + i:g}"
                    for i, api in enumerate(expected_api)]
    assert all(l.endswith("result=0 outcome=2 claimed_by=0 id=1d:2e") for l in lines(proc, "B completed"))
    assert lines(proc, "A stats") == [f"A stats handled=0 substituted={len(ALL_PATHS)} loads=0 "
                                      "substitute_failures=0 failures=0"]
    proc = run(rig, "rd", A_MODE="kernel")  # a CUkernel is launched as a CUfunction
    assert [l.split()[2] for l in lines(proc, "stub ")] == ["f=0xbeef", "f=0xbeef"]


def test_substitute_code_is_loaded_once_per_context(rig):
    proc = run(rig, "rrdpgx", A_MODE="code")
    # The kernel's own cubin, loaded by the layer once (one load for the app's own
    # cuModuleLoadData, one for the substitute), its entry found by the kernel's name.
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    stub = lines(proc, "stub ")
    assert len(stub) == 6 and all(f"f={AXPY} " in l for l in stub)
    assert [l.split()[1] for l in stub][:3] == ["cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel"]
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=6 loads=1 substitute_failures=0 failures=0"]
    # PTX, under another entry name (what the client names is launched).
    proc = run(rig, "rr", A_MODE="ptx", A_ENTRY="_Z9clusteredPf")
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    assert all("f=_Z9clusteredPf " in l for l in lines(proc, "stub "))


def test_substitute_code_bytes_may_be_freed_once_the_launch_returned(rig):
    """The layer keeps no pointer to a CODE substitute's bytes (the driver copies them into
    the module it loads): a client that wipes and frees them as each launch returns gets
    every later launch substituted from the loaded module."""
    proc = run(rig, "rrdS", A_MODE="code-copy")
    assert "stub-driver cuModuleLoadData=2" in proc.stderr  # the app's own module, and the substitute once
    stub = lines(proc, "stub cuLaunchKernel")
    assert len(stub) == 4 and all(f"f={AXPY} " in l for l in stub)
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=4 loads=1 substitute_failures=0 failures=0"]


def test_substitute_code_named_by_its_number_is_loaded(rig):
    """API 6: code_kind NULL, kir_hook_substitute.image_kind KIR_KIND_CUBIN: the layer loads it
    as it loads code named "cubin"; a number the runtime cannot load is refused by number."""
    proc = run(rig, "rrd", A_MODE="code-number")
    assert "stub-driver cuModuleLoadData=2" in proc.stderr
    stub = lines(proc, "stub ")
    assert len(stub) == 3 and all(f"f={AXPY} " in l for l in stub)
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=3 loads=1 substitute_failures=0 failures=0"]
    proc = run(rig, "r", log=True, A_MODE="hip-number")
    assert 'image_kind 5 (code-object) cannot be loaded by the CUDA runtime ("cubin" or "ptx")' in proc.stderr
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=1 failures=1"]


def test_a_damaged_fatbin_is_counted_under_its_error_code(rig, tmp_path):
    """kir_hook_failure_count (API 6): a registration libkir cannot parse is counted under its
    error's code (KIR_ERROR_*), the code Python's reader raises for the same bytes."""
    d, fatbin, cubin = rig
    good = fatbin.read_bytes()
    second = kir.open(fatbin).containers[0].images[1].entry.offset
    for name, at, patch in (("magic", 0, bytes([good[0] ^ 0xFF])),  # the container's magic
                            ("entry", second + 8, struct.pack("<Q", 1 << 32))):  # a payload past the container
        damaged = tmp_path / f"{name}.fatbin"
        damaged.write_bytes(good[:at] + patch + good[at + len(patch):])
        with pytest.raises(KirError) as error:
            kir.open(damaged).images
        proc = run((d, damaged, cubin), "", log=True)
        assert "registered without its code" in proc.stderr
        assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=0 failures=1"]
        assert lines(proc, "A failures by code") == [f"A failures by code {error.value.code.value}=1"], name
    # Failures that are no libkir error (a substitute the driver refuses) have no code.
    proc = run(rig, "r", A_MODE="bad-code")
    assert lines(proc, "A failures by code") == ["A failures by code"]


def test_a_substitute_that_cannot_load_launches_the_original_and_is_logged(rig):
    proc = run(rig, "rd", log=True, A_MODE="bad-code")
    stub = lines(proc, "stub ")
    assert [l.split()[1] for l in stub] == ["cudaLaunchKernel", "cuLaunchKernel"]
    assert stub[1].split()[2] == f"f={AXPY}"
    assert all(l.endswith("result=0 outcome=0 claimed_by=0 id=1d:2e") for l in lines(proc, "A completed"))
    logged = [l for l in proc.stderr.splitlines() if l.startswith("kir-hook: error:")]
    assert len(logged) == 2
    assert re.fullmatch(rf"kir-hook: error: launch of {AXPY} \(cudaLaunchKernel\): client 0's substitute "
                        r"000000000000001d000000000000002e: cuModuleLoadData of its cubin failed: error 200; "
                        r"the original kernel is launched", logged[0]), logged[0]
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=2 failures=2"]
    # A handle of the other vendor, and no current context for code: the same.
    proc = run(rig, "r", log=True, A_MODE="hip")
    assert "a hipFunction_t for a CUDA launch" in proc.stderr and len(lines(proc, "stub cudaLaunchKernel")) == 1
    proc = run(rig, "d", log=True, A_MODE="code", STUB_NO_CONTEXT="1")
    assert "no current CUDA context" in proc.stderr and lines(proc, "stub cuLaunchKernel")[0].split()[2] == f"f={AXPY}"


def test_a_code_substitute_launches_with_more_than_48_kib_of_shared_memory(rig):
    """Issue 23: the driver refuses a launch with more than 48 KiB of dynamic shared memory
    unless the function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES was raised (the
    stub driver too). The layer loads a CODE substitute itself, so it raises the limit:
    once per function and size, before the launch; the app's own launches are untouched."""
    proc = run(rig, "SSrT", A_MODE="code")
    assert lines(proc, "app ") == ["app S returned 0", "app S returned 0", "app r returned 0", "app T returned 0"]
    assert lines(proc, "stub cuFuncSetAttribute") == [
        f"stub cuFuncSetAttribute f={AXPY} attribute=8 value=65536",   # the first 64 KiB launch
        f"stub cuFuncSetAttribute f={AXPY} attribute=8 value=81920"]   # raised again for 80 KiB
    stub = lines(proc, "stub cuLaunchKernel")
    assert [l.split()[5] for l in stub] == ["shared=65536", "shared=65536", "shared=16", "shared=81920"]
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=4 loads=1 substitute_failures=0 failures=0"]
    # A FUNCTION substitute is the client's handle: the layer leaves its attributes alone,
    # and the driver refuses the launch as it would the app's.
    proc = run(rig, "S", A_MODE="function")
    assert lines(proc, "stub cuFuncSetAttribute") == []
    assert lines(proc, "stub cuLaunchKernel") == [
        "stub cuLaunchKernel f=0xf00d refused: 65536 bytes of dynamic shared memory"]


def test_the_launch_event_names_its_device(device_rig, rig):
    """Hook API 7: kir_hook_launch.device, .arch, .context, set before launch_override is
    asked; unknown (-1, "", NULL) without a device, and not computed when every client skips them."""
    proc = run(device_rig, "rd", A_MODE="handled", A_DEVICE="1")
    assert lines(proc, "A device-") == [
        "A device-asked cudaLaunchKernel device=0 arch=sm_90 context=0xc0",
        "A device-begin cudaLaunchKernel device=0 arch=sm_90 context=0xc0",
        "A device-asked cuLaunchKernel device=0 arch=sm_90 context=0xc0",
        "A device-begin cuLaunchKernel device=0 arch=sm_90 context=0xc0"]
    # The stub driver without cuCtxGetDevice: the context only.
    proc = run(rig, "r", A_DEVICE="1")
    assert lines(proc, "A device-begin") == ["A device-begin cudaLaunchKernel device=-1 arch= context=0xc0"]
    # No context: nothing known.
    proc = run(device_rig, "d", A_DEVICE="1", STUB_NO_CONTEXT="1")
    assert lines(proc, "A device-begin") == ["A device-begin cuLaunchKernel device=-1 arch= context=(nil)"]
    # Every API-7 client skips them (C is an API-3 client, which cannot read them): never computed.
    proc = run(device_rig, "r", A_DEVICE="1", A_SKIP="device", B_SKIP="device")
    assert lines(proc, "A device-begin") == ["A device-begin cudaLaunchKernel device=-1 arch= context=(nil)"]
    proc = run(device_rig, "r", A_DEVICE="1", A_SKIP="device")  # B reads them: computed for all
    assert lines(proc, "A device-begin") == ["A device-begin cudaLaunchKernel device=0 arch=sm_90 context=0xc0"]


def test_on_loaded_is_told_of_each_load_before_the_first_launch(device_rig):
    """Hook API 7: the claimer's on_loaded gets the module, the function, the context, the
    device, the id and the kernel of a CODE substitute once per (context, id), before its
    first launch; another client's on_loaded is not called for it."""
    proc = run(device_rig, "rrd", A_MODE="code", A_LOADED="print", B_LOADED="print")
    out = proc.stdout.splitlines()
    loaded = [l for l in out if " loaded " in l]
    assert loaded == [f"A loaded entry={AXPY} kernel={AXPY} module=set function=set context=0xc0 device=0 "
                      "arch=sm_90 id=1d:2e size=1"]
    first_launch = next(i for i, l in enumerate(out) if l.startswith("stub cuLaunchKernel"))
    assert out.index(loaded[0]) < first_launch
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=3 loads=1 substitute_failures=0 failures=0"]


def test_a_substitute_on_loaded_refuses_runs_the_original(device_rig):
    """on_loaded returning non-zero: the module is unloaded, a substitute failure is counted
    and logged, the original runs; the next claim loads the code again (and asks again)."""
    proc = run(device_rig, "rr", log=True, A_MODE="code", A_LOADED="refuse")
    assert len(lines(proc, "A loaded")) == 2
    assert [l.split()[1] for l in lines(proc, "stub ")] == ["cudaLaunchKernel", "cudaLaunchKernel"]
    assert "stub-driver cuModuleUnload=2" in proc.stderr
    assert proc.stderr.count("its client's on_loaded refused it (returned 1); the original kernel is launched") == 2
    assert lines(proc, "A stats") == ["A stats handled=0 substituted=0 loads=0 substitute_failures=2 failures=2"]


# --- HIP -------------------------------------------------------------------------------------

# The suite's stub libamdhip64.so (tests/fixtures/hip_stub_runtime.c: launches fail
# with 100, no device) plus the module API a substitute needs, printing what it gets.
HIP_STUB = source("hook/hook_override_hip_stub.c")


@pytest.fixture(scope="module")
def hip_rig(built, rig):
    if "hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    # hip_app finds its runtime in $ORIGIN/.hip_app.work (DT_RPATH, build.rpath): a copy
    # of the app finds this one there, whatever LD_LIBRARY_PATH says.
    d = rig[0] / "hip"
    (d / ".hip_app.work").mkdir(parents=True, exist_ok=True)
    shutil.copy(built["hip_app"], d / "hip_app")
    (d / "stub.c").write_text(HIP_STUB)
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(Path(__file__).parents[1] / "fixtures"), "stub.c",
                    "-Wl,-soname,libamdhip64.so", "-o", ".hip_app.work/libamdhip64.so"], check=True, cwd=d)
    return d, d / "hip_app", rig[0]


def run_hip(hip_rig, **modes):
    d, app, clients = hip_rig
    proc = subprocess.run([app], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1",
                               "KIR_HOOK_CLIENTS": ":".join(str(clients / f"lib{c}.so") for c in "ABC"),
                               **modes})
    return proc


def test_hip_launches_can_be_claimed(hip_rig):
    plain = run_hip(hip_rig)
    assert plain.returncode == 3 and lines(plain, "launch ") == ["launch 100", "launch 100"]  # the stub's
    handled = run_hip(hip_rig, A_MODE="handled")
    assert lines(handled, "launch ") == ["launch 77", "launch 77"]
    assert [l.split()[3] for l in lines(handled, "A asked")] == ["kernel=_Z4axpyfPKfPfi", "kernel=_Z5countx"]
    # A hipFunction_t: launched with hipModuleLaunchKernel and the app's configuration.
    function = run_hip(hip_rig, A_MODE="hip")
    assert lines(function, "stub hipModuleLaunchKernel") == [
        "stub hipModuleLaunchKernel f=handle grid=8 block=128 shared=0",
        "stub hipModuleLaunchKernel f=handle grid=1 block=64 shared=16"]
    assert lines(function, "launch ") == ["launch 0", "launch 0"]
    # Code: a code object loaded once per device, its entry the launched kernel's name.
    code = run_hip(hip_rig, A_MODE="hip-code")
    assert lines(code, "stub hipModuleGetFunction") == ["stub hipModuleGetFunction _Z4axpyfPKfPfi",
                                                       "stub hipModuleGetFunction _Z5countx"]
    assert "stub-hip hipModuleLoadData=2" in code.stderr  # two kernels: two (id, entry) keys
    assert all(l.endswith("outcome=2 claimed_by=0 id=1d:2e") for l in lines(code, "B completed"))
    # A CUDA handle for a HIP launch: logged, the original runs.
    wrong = run_hip(hip_rig, A_MODE="function")
    assert lines(wrong, "launch ") == ["launch 100", "launch 100"]
    assert wrong.stderr.count("a CUDA handle for a HIP launch") == 2


HIP_MODULE_APP = Path(__file__).resolve().parents[1] / "fixtures" / "hook" / "hip_module_app.py"


@pytest.mark.parametrize("launch", ["module", "ext", "cooperative"])
def test_hip_module_launches_can_be_claimed(hip_rig, built, tmp_path, launch):
    """Launches of a hipFunction_t the app looked up (issue 25 §1) are claimable as
    cuLaunchKernel's are: HANDLED returns the client's result, a hipFunction_t substitute
    runs through the app's own entry point with the app's configuration, CODE is loaded
    once with hipModuleLoadData. (The stub's hipExtModuleLaunchKernel and cooperative
    launch print through its hipModuleLaunchKernel; an ext grid is in work-items.)"""
    import json
    import sys
    d, _, clients = hip_rig
    image = tmp_path / "axpy.co"
    image.write_bytes(next(i for i in kir.open(built["hip.o"]).images if i.kind == "code-object").read())

    def go(**modes):
        proc = subprocess.run([sys.executable, str(HIP_MODULE_APP), str(d / ".hip_app.work" / "libamdhip64.so"),
                               str(image), "data", launch], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1",
                                   "KIR_HOOK_CLIENTS": ":".join(str(clients / f"lib{c}.so") for c in "ABC"),
                                   **modes})
        assert proc.returncode == 0, proc.stderr
        return json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("{"))), proc

    launches = ["launch", "launch-extra"] if launch == "module" else ["launch"]
    grid = "1000" if launch == "ext" else "8"
    plain, proc = go()
    assert [plain[k] for k in launches] == [0] * len(launches)
    assert lines(proc, "stub hipModuleLaunchKernel") == [
        f"stub hipModuleLaunchKernel f=loaded grid={grid} block=128 shared={s}" for s in (0, 16)[:len(launches)]]
    handled, proc = go(A_MODE="handled")
    assert [handled[k] for k in launches] == [77] * len(launches)
    assert lines(proc, "stub hipModuleLaunchKernel") == []
    assert [l.split()[3] for l in lines(proc, "A asked")] == [f"kernel={AXPY}"] * len(launches)
    function, proc = go(A_MODE="hip")
    assert lines(proc, "stub hipModuleLaunchKernel") == [
        f"stub hipModuleLaunchKernel f=handle grid={grid} block=128 shared={s}" for s in (0, 16)[:len(launches)]]
    code, proc = go(A_MODE="hip-code")
    assert "stub-hip hipModuleLoadData=2" in proc.stderr  # the app's module, and the substitute once
    assert lines(proc, "stub hipModuleGetFunction") == [f"stub hipModuleGetFunction {AXPY}"] * 2
    assert all(l.endswith("outcome=2 claimed_by=0 id=1d:2e") for l in lines(proc, "B completed"))


def test_a_hip_code_substitute_opts_in_to_shared_memory_over_64_kib(hip_rig, built, tmp_path):
    """AMD gives a work-group 64 KiB of LDS without opting in (VendorTraits::shared_without_opt_in;
    CUDA's 48 KiB was used for HIP too): a CODE substitute launched with 56 KiB is launched as
    it is, one with 80 KiB gets hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize = 8)
    first — whose refusal (ROCm refuses a module's function) is no failure."""
    import json
    import sys
    d, _, clients = hip_rig
    image = tmp_path / "axpy.co"
    image.write_bytes(next(i for i in kir.open(built["hip.o"]).images if i.kind == "code-object").read())
    for shared, expected in ((56 << 10, []), (80 << 10, ["stub hipFuncSetAttribute f=loaded attribute=8 value=81920"])):
        proc = subprocess.run([sys.executable, str(HIP_MODULE_APP), str(d / ".hip_app.work" / "libamdhip64.so"),
                               str(image), "data", "module", str(shared)], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1",
                                   "KIR_HOOK_CLIENTS": ":".join(str(clients / f"lib{c}.so") for c in "ABC"),
                                   "A_MODE": "hip-code"})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("{")))["launch"] == 0
        assert lines(proc, "stub hipFuncSetAttribute") == expected
        assert lines(proc, "stub hipModuleLaunchKernel")[0] == (
            f"stub hipModuleLaunchKernel f=loaded grid=8 block=128 shared={shared}")
        assert lines(proc, "A stats") == ["A stats handled=0 substituted=2 loads=1 substitute_failures=0 failures=0"]


def test_a_hip_launch_event_names_its_device(hip_rig):
    """Hook API 7 on HIP: hipGetDevice's ordinal, the target of the code object the layer
    reads for the kernel (HIP has no stable C call naming the device's), no context."""
    targets = {i.target for c in kir.open(hip_rig[1]).containers for i in c.images if i.target.startswith("gfx")}
    proc = run_hip(hip_rig, A_DEVICE="1")
    begins = lines(proc, "A device-begin")
    assert len(begins) == 2, proc.stdout
    for line in begins:
        m = re.fullmatch(r"A device-begin hipLaunchKernel device=0 arch=(\S+) context=\(nil\)", line)
        assert m and m.group(1) in targets, (line, targets)


def test_a_module_loaded_through_the_driver_is_traced_with_its_images(rig):
    """cuModuleLoadData of a bare cubin is one image, and the registered fatbin has its
    container's images (run AF on the H200: the layer passed the module's count on before
    reading the module, and the trace said 0)."""
    import json

    import kir
    proc = run(rig, "r", KIR_TRACE="json")
    fatbins = [json.loads(l) for l in proc.stderr.splitlines() if l.startswith('{"event":"register-fatbin"')]
    assert [e["images"] for e in fatbins] == [len(kir.open(rig[1]).containers[0].images), 1]
