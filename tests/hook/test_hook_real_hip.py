"""The hook over the real ROCm HIP runtime (issue 25's level 2; docs/hip.md): hip_real_app,
built here by clang-22 and linked against a real libamdhip64.so (Debian's ROCm 5.2 in CI, no
GPU), prints the return code of every HIP call it makes. Without a GPU the runtime accepts
the registrations clang's constructor makes (__hipRegisterFatBinary only checks the HIPF
wrapper and stores the bundle: ROCm/clr hipamd/src/hip_platform.cpp; __hipRegisterFunction
defers loading, HIP_ENABLE_DEFERRED_LOADING defaults to 1) and fails every device call:
hipGetDeviceCount with hipErrorNoDevice (100) and a count of 0, every call that opens with
HIP_INIT_API with hipErrorInvalidDevice (101), because hip::init failed (hipamd/src/
hip_internal.hpp, HIP_INIT). Under kir trace and kir record the app's output, stderr and exit
status must be exactly those of a run without kir, and the hook must see the registrations.
The last test needs an AMD GPU (running.require_amd_gpu) and skips without one."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import build
import kir
from kir.hashing import kernel_hashes
from running import amd_gpu_count, real_hip_library, require_amd_gpu

APP = build.HERE / "hip_real_app.hip"
ARCHS = ("gfx90a", "gfx942")  # MI250X, MI300A

# hip/hip_runtime_api.h, enum hipError_t (the same in ROCm 5.2 and 6.3: docs/hip.md).
HIP_SUCCESS, HIP_ERROR_NO_DEVICE, HIP_ERROR_INVALID_DEVICE = 0, 100, 101
# What the app calls, in order, when no module loads (without argv[1] or without a GPU).
CALLS = ["hipGetDeviceCount", "hipGetDevice", "hipMalloc", "hipMalloc", "hipHostMalloc", "hipMallocManaged",
         "hipMemcpy", "hipMemcpy", "hipLaunchKernel", "hipDeviceSynchronize", "hipGetLastError",
         "hipModuleLoadData", "hipModuleGetFunction", "hipMemcpy", "hipFree", "hipFree", "hipHostFree", "hipFree"]


def compile_app(out: Path, library: Path, *archs: str) -> Path:
    if shutil.which(build.CLANG) is None:
        pytest.skip(f"{build.CLANG} not installed: the HIP app cannot be built")
    command = [*build.HIP, *(f"--offload-arch={a}" for a in archs), str(APP), "-x", "none", str(library),
               *build.rpath(library.parent), "-o", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def real_app(tmp_path_factory) -> Path:
    library = real_hip_library()
    return compile_app(tmp_path_factory.mktemp("real_hip") / "hip_real_app", library, *ARCHS)


@pytest.fixture(scope="module")
def no_gpu():
    if amd_gpu_count():
        pytest.skip("an AMD GPU is present: the no-device results do not apply")


def results(stdout: str) -> list[tuple[str, int]]:
    """(call, return code) for each line the app printed."""
    return [(l.split()[0], int(l.split()[1])) for l in stdout.splitlines() if l.startswith("hip")]


def app_lines(stdout: str) -> list[str]:
    return [l for l in stdout.splitlines() if not l.startswith("{")]


def events(stdout: str) -> list[dict]:
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


def test_real_runtime_without_a_gpu_fails_every_device_call(real_app, no_gpu):
    bare = subprocess.run([real_app], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 3, bare.stderr
    got = results(bare.stdout)
    assert [c for c, _ in got] == CALLS
    assert got[0] == ("hipGetDeviceCount", HIP_ERROR_NO_DEVICE)
    assert "count 0" in bare.stdout.splitlines()[0]
    assert {r for _, r in got[1:]} == {HIP_ERROR_INVALID_DEVICE}
    assert "check 256 mismatches" in bare.stdout


@pytest.mark.parametrize("command", [("trace", "--json"), ("record", "-o", "{tmp}/records")],
                         ids=["trace", "record"])
def test_every_call_and_error_passes_through_the_hook_untouched(real_app, kir_cli, tmp_path, command):
    bare = subprocess.run([real_app], capture_output=True, text=True, timeout=120)
    hooked = kir_cli(*(a.format(tmp=tmp_path) for a in command), "--", real_app)
    assert hooked.returncode == bare.returncode == 3, hooked.stderr
    assert app_lines(hooked.stdout) == bare.stdout.splitlines()
    assert results(hooked.stdout) == results(bare.stdout)
    if command[0] == "trace":  # kir record says what it recorded (and why not) on stderr
        assert hooked.stderr == bare.stderr


@pytest.mark.parametrize("deferred", ["1", "0"])
def test_hook_sees_the_real_runtimes_registrations(real_app, kir_cli, no_gpu, monkeypatch, deferred):
    # HIP_ENABLE_DEFERRED_LOADING=0: __hipRegisterFunction initializes HIP and loads the
    # kernel on every device (none here) at registration instead of at its first launch.
    monkeypatch.setenv("HIP_ENABLE_DEFERRED_LOADING", deferred)
    traced = kir_cli("trace", "--json", "--", real_app)
    assert traced.returncode == 3, traced.stderr
    seen = events(traced.stdout)
    code_objects = [i for i in kir.open(real_app).images if i.kind == "code-object"]
    assert sorted(i.target for i in code_objects) == sorted(ARCHS)
    fatbins = [e for e in seen if e["event"] == "register-fatbin"]
    assert [e["images"] for e in fatbins] == [len(code_objects)]
    assert fatbins[0]["handle"] != 0  # the real runtime's FatBinaryInfo**, not a failure
    hashes, errors = kernel_hashes(kir.open(real_app))
    assert not errors
    first = code_objects[0]  # without KIR_HOOK_ARCH, the bundle's first code object
    static = {h.kernel: h.static.hex for h in hashes if h.target == first.target and h.code_kind == "code-object"}
    kernels = {e["kernel"]: e["static"] for e in seen if e["event"] == "register-kernel"}
    assert kernels == static == {"_Z4axpyfPKfPfi": static["_Z4axpyfPKfPfi"]}
    assert {e["name"]: e["size"] for e in seen if e["event"] == "register-global"} == {"counter": 4}
    assert [e["handle"] for e in seen if e["event"] == "unregister-fatbin"] == [fatbins[0]["handle"]]
    # The launch the hook saw failed as the app was told: hipErrorInvalidDevice, untouched.
    launches = [e for e in seen if e["event"] == "launch"]
    assert [(e["api"], e["kernel"], e["result"]) for e in launches] == [
        ("hipLaunchKernel", "_Z4axpyfPKfPfi", HIP_ERROR_INVALID_DEVICE)]
    assert launches[0]["grid"] == [4, 1, 1] and launches[0]["block"] == [64, 1, 1]
    assert launches[0]["values"][0] == "2" and launches[0]["values"][3] == "256"
    # No allocation succeeded: none is tracked.
    assert not [e for e in seen if e["event"] in ("alloc", "free")]


def test_amd_gpu_launch_succeeds_and_trace_shows_it(tmp_path, kir_cli):
    """On an MI250X / MI300A (docs/hip.md): both launch paths run axpy, the results are
    right, and under kir trace the output is the same and the launch is seen succeeding."""
    require_amd_gpu()
    library = real_hip_library()
    app = compile_app(tmp_path / "hip_real_app", library, "native")
    image = tmp_path / "axpy.co"
    proc = subprocess.run([*build.HIP, "--offload-arch=native", "--cuda-device-only", "--no-gpu-bundle-output", "-c",
                           str(APP), "-o", str(image)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bare = subprocess.run([app, image], capture_output=True, text=True, timeout=300)
    assert bare.returncode == 3, bare.stderr
    got = dict(results(bare.stdout))
    assert got["hipLaunchKernel"] == got["hipModuleLaunchKernel"] == HIP_SUCCESS, bare.stdout
    assert {r for _, r in results(bare.stdout)} == {HIP_SUCCESS}, bare.stdout
    assert "check 0 mismatches" in bare.stdout
    traced = kir_cli("trace", "--json", "--", app, image)
    assert traced.returncode == 3, traced.stderr
    assert app_lines(traced.stdout) == bare.stdout.splitlines()
    launches = [e for e in events(traced.stdout) if e["event"] == "launch" and e["api"] == "hipLaunchKernel"]
    assert [(e["kernel"], e["result"]) for e in launches] == [("_Z4axpyfPKfPfi", HIP_SUCCESS)]
