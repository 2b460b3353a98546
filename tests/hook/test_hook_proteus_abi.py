"""Hook API 7: the Proteus ABI of a HIP app, lambda captures and one registration's
globals, on the HIP stub rig (tests/fixtures/hip_stub_runtime.c: no ROCm, no GPU).

A Proteus-built HIP app registers its bundle with __hipRegisterFatBinary, then the
pass's code tells the Proteus runtime again: __proteus_register_fatbinary(handle, the
same HIPF wrapper, module id) and __proteus_register_var for each device variable
(Proteus src/pass/ProteusPass.cpp). tests/fixtures/hook/proteus_hip_abi.py makes
those calls through ctypes on the bundle of `proteus_hip_app` (its code object
carries the pass's `.jit.bitcode.*` sections) and prints what kir.hook holds."""
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
from build import BUNDLER, HIP, LAYOUT, rpath  # tests/support/build.py
from running import require
from stub_cuda import HOOK, INCLUDE, lines, rig  # noqa: F401  (rig: fixture)

pytestmark = pytest.mark.usefixtures("hostile_library_path")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCRIPT = FIXTURES / "hook" / "proteus_hip_abi.py"
AXPY = "_Z4axpyfPKfPfi"


@pytest.fixture(scope="module")
def proteus_hip(built):
    if "proteus_hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    work = built["proteus_hip_app"].parent / ".proteus_hip_app.work"
    return work / "libamdhip64.so", work / "bundle.bin"


def registered(proteus_hip, *modes, stub=None, env=None):
    runtime, bundle = proteus_hip
    proc = subprocess.run([sys.executable, str(SCRIPT), str(stub or runtime), str(bundle), *modes],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1", **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    assert len(answer) == 1, proc.stdout
    return json.loads(answer[0]), proc


def test_the_proteus_notice_of_a_hip_registration_keeps_it(proteus_hip):
    """Regression (issue 23): the layer read the HIPF wrapper as a CUDA one ("expected magic
    0x466243b1, found 0x48495046"), failed, and retired the registration: the kernel was
    left unloaded with no parameters and no IR."""
    plain, _ = registered(proteus_hip)
    seen, proc = registered(proteus_hip, "proteus")
    (axpy,) = [k for k in plain["kernels"] if k["name"] == AXPY]
    assert axpy["params"] == 4 and axpy["ir"] > 0 and not axpy["unloaded"]
    assert seen["kernels"] == plain["kernels"]  # the same view, live, with its layout and IR
    assert seen["stats"]["failures"] == 0 and seen["stats"]["unregistered"] == 0, proc.stderr
    assert seen["stats"]["fatbins"] == 1 and seen["stats"]["kernels"] == len(plain["kernels"])
    assert proc.stderr == ""


def test_the_hook_s_proteus_hash_is_kir_hash_proteus_offline(proteus_hip, built, kir_cli):
    """Issue 25 §5: the Proteus static hash the layer computes for the HIP registration
    (kir_hook_kernel_proteus_hash, API 10: Proteus's JitEngineDeviceHIP getModuleHash and
    createStaticHash over the registered code object) is what `kir hash --proteus` prints
    offline for the same binary, for Proteus built with LLVM >= 20 (XXH3) and before (FNV-1a)."""
    seen, _ = registered(proteus_hip, "proteus")
    at_run_time = {k["name"]: k["proteus"] for k in seen["kernels"]}
    offline = []
    for flags in ([], ["--llvm-before-20"]):
        result = kir_cli("hash", "--jsonl", *flags, built["proteus_hip_app"])
        assert result.returncode == 0, result.stderr
        offline.append({h["kernel"]: h["proteus"] for h in map(json.loads, result.stdout.splitlines())
                        if h["proteus"] is not None})
    assert set(offline[0]) == set(offline[1]) == {AXPY}  # the JIT kernel: the one Proteus hashes
    assert at_run_time[AXPY] == [offline[0][AXPY], offline[1][AXPY]]
    assert offline[0][AXPY] != offline[1][AXPY]


def test_a_device_variable_the_pass_registers_again_is_one_global(proteus_hip):
    """Regression (issue 23): __hipRegisterVar, then the pass's __proteus_register_var for
    the same variable, listed it twice (one global, one view)."""
    seen, _ = registered(proteus_hip, "proteus")
    assert seen["globals"] == [["counter", True, False]]
    assert seen["stats"]["globals"] == 1
    # kir_hook_fatbin_globals (API 7): the registration's own, once.
    assert seen["fatbin_globals"] == ["counter"]
    plain, _ = registered(proteus_hip)
    assert plain["fatbin_globals"] == ["counter"] and plain["globals"] == seen["globals"]


@pytest.mark.parametrize("mode, why", [
    ("damaged", r"HIP fatbin 0x[0-9a-f]+: registered without its code: "),
    ("stranger", r"__proteus_register_fatbinary 0x[0-9a-f]+: its wrapper at 0x[0-9a-f]+ starts with 0x12345678, "
                 r"neither CUDA's magic 0x466243b1 nor HIP's 0x48495046: the live registration is kept"),
])
def test_a_second_notice_that_cannot_be_read_is_a_failure_not_an_unload(proteus_hip, mode, why):
    plain, _ = registered(proteus_hip)
    seen, proc = registered(proteus_hip, mode)
    assert seen["kernels"] == plain["kernels"] and seen["stats"]["unregistered"] == 0
    assert seen["stats"]["failures"] == 1
    errors = [l for l in proc.stderr.splitlines() if l.startswith("kir-hook: error:")]
    assert len(errors) == 1 and re.search(why, errors[0]), proc.stderr


def test_vector_and_static_array_runtime_constants_are_distinct(proteus_hip):
    """Proteus's VECTOR (10) and STATIC_ARRAY (9) RuntimeConstantTypes (CompilerInterfaceTypes.h)
    were both KIR_JIT_ARRAY with by_value 1: now VECTOR is KIR_JIT_VECTOR, and its JIT key
    is a by-value array's, as before (kir.h ABI 10)."""
    from kir.hashing import jit_key_of_launch
    from kir.model import JitArg
    seen, proc = registered(proteus_hip, "rcinfo")
    assert seen["jit_args"] == [[1, "vector", 11, True, 4], [2, "array", 11, True, 4]], proc.stderr
    values = struct.pack("<4f", 1, 2, 3, 4)
    keys = {kind: jit_key_of_launch("00" * 16, "gfx90a", [values], [JitArg(1, kind, 11, True, 4)],
                                    param_sizes=[16]) for kind in ("vector", "array")}
    assert keys["vector"] == keys["array"]
    other = jit_key_of_launch("00" * 16, "gfx90a", [struct.pack("<4f", 1, 2, 3, 5)], [JitArg(1, "vector", 11, True, 4)],
                              param_sizes=[16])
    assert other != keys["vector"]


def test_a_record_keeps_a_vector_as_the_by_value_array_it_was(tmp_path):
    """Record format versions never change (docs/record-format.md, "Compatibility"): a
    KIR_JIT_VECTOR is written as kind "array", by value, as before kir.h ABI 10."""
    from kir import _core
    from kir.hashing import static_hash
    from kir.record import JitArg, Record
    h = static_hash(AXPY, "cubin", [b"x"])
    b = _core.RecordBuilder(str(tmp_path / "r"), 4096)
    b.set_process(1, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(AXPY, "axpy(float, float const*, float*, int)", h, [0, 16], [16, 16])
    b.set_image("cubin", "sm_90", b"\x7fELF fake")
    b.set_jit_args([(1, "vector", 11, True, 4, 0, 0), (2, "array", 11, True, 4, 0, 0)])
    b.set_launch("cudaLaunchKernel", h, (1, 1, 1), (32, 1, 1), 0, 0, [b"\0" * 16, b"\0" * 16], 0)
    assert Record.load(b.write()).kernel.jit_args == [JitArg(1, "array", 11, True, 4), JitArg(2, "array", 11, True, 4)]


def test_proteus_launch_goes_to_the_hip_runtime(proteus_hip):
    """Regression (issue 23): without Proteus, __proteus_launch_kernel went to
    cudaLaunchKernel in a HIP process; the stub's hipLaunchKernel answers 100."""
    seen, _ = registered(proteus_hip, "proteus", "launch")
    assert seen["launched"] == 100
    assert seen["stats"]["launches"] == 1


def test_a_claimed_proteus_launch_runs_its_substitute_through_hip_module_launch(proteus_hip, rig, tmp_path):
    """A client's CODE substitute of a __proteus_launch_kernel launch in a HIP process: loaded
    with hipModuleLoadData, launched with hipModuleLaunchKernel (the stub prints each)."""
    stub = tmp_path / "libamdhip64.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(FIXTURES), str(FIXTURES / "hook" / "hook_override_hip_stub.c"),
                    "-Wl,-soname,libamdhip64.so", "-o", str(stub)], check=True)
    clients = {"KIR_HOOK_CLIENTS": str(rig[0] / "libA.so")}
    seen, proc = registered(proteus_hip, "proteus", "launch", stub=stub, env={**clients, "A_MODE": "hip-code"})
    assert seen["launched"] == 0
    assert lines(proc, "stub hipModuleGetFunction") == [f"stub hipModuleGetFunction {AXPY}"]
    assert lines(proc, "stub hipModuleLaunchKernel") == [
        "stub hipModuleLaunchKernel f=loaded grid=2 block=32 shared=16"]
    assert lines(proc, "A asked") == [f"A asked __proteus_launch_kernel kernel={AXPY} sized=1"]
    assert seen["stats"]["substituted"] == 1 and seen["stats"]["failures"] == 0, proc.stderr


# --- lambda captures ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lambda_app(built, tmp_path_factory):
    """proteus_lambda_app.hip built the way `proteus_hip_app` is (tests/support/build.py): its
    device module embedded as the pass's `.jit.bitcode.*` sections in its code object."""
    if "proteus_hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    # built here, not carried: the LLVM tools it needs (not on the GPU machine: run AN)
    require("clang-22", "clang++-22", "llvm-nm-22", "llvm-objcopy-22", BUNDLER)
    d = tmp_path_factory.mktemp("lambda")
    source = FIXTURES / "hook" / "proteus_lambda_app.hip"

    def run(*args):
        return subprocess.run([str(a) for a in args], check=True, cwd=d, capture_output=True, text=True).stdout

    run("gcc", "-shared", "-fPIC", FIXTURES / "hip_stub_runtime.c", "-Wl,-soname,libamdhip64.so", "-o",
        "libamdhip64.so")
    run(*HIP, "--offload-arch=gfx90a", "--cuda-device-only", "-emit-llvm", "-c", source, "-o", "dev.bc")
    run(*HIP, "--offload-arch=gfx90a", "--cuda-device-only", "--no-gpu-bundle-output", "-c", source, "-o", "k.co")
    kernel = re.search(r" T (_Z5apply\S+)", run("llvm-nm-22", "--defined-only", "k.co"))[1]
    sections = run(sys.executable, LAYOUT, "hip-sections", "dev.bc", kernel).split()
    run("llvm-objcopy-22", *sections, "k.co", "k_jit.co")
    run(BUNDLER, "--type=o", "--targets=host-x86_64-unknown-linux-gnu-,hipv4-amdgcn-amd-amdhsa--gfx90a",
        "--input=/dev/null", "--input=k_jit.co", "--output=bundle.bin")
    run(*HIP, "--offload-arch=gfx90a", "--cuda-host-only", "-Xclang", "-fcuda-include-gpubinary", "-Xclang",
        "bundle.bin", "-c", source, "-o", "host.o")
    run("g++", "-c", f"-I{INCLUDE}", FIXTURES / "hook" / "proteus_lambda_host.cpp", "-o", "helper.o")
    run("clang++-22", "host.o", "helper.o", f"-L{d}", "-lamdhip64", "-ldl", *rpath(d), "-o", "app")
    return d / "app", kernel


def captures(proc, label):
    return [tuple(l.split(" ", 2)[2].split("|")) for l in proc.stdout.splitlines() if l.startswith(f"{label} capture ")]


def run_lambda_app(app, preload):
    proc = subprocess.run([app], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": preload, "KIR_HOOK_LOG": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_lambda_captures_are_the_kernels_own(lambda_app):
    """`apply` calls lambda f (its template argument) and, through f, `inner` (a function of
    its IR, not of its name); `unused` is registered but called by no kernel. Each run's
    register_lambda makes its values current; one with nothing pending changes nothing."""
    app, kernel = lambda_app
    proc = run_lambda_app(app, str(HOOK))
    assert proc.stderr == ""
    head = [l for l in proc.stdout.splitlines() if l.startswith(f"first {kernel} ")]
    assert len(head) == 1 and int(re.search(r"ir=(\d+)", head[0])[1]) > 0, proc.stdout
    where = kir.demangle(kernel).split("::{lambda")[0].split("<", 1)[1]  # "run(int, double, int, int*)"
    f, inner = f"{where}::{{lambda()#1}}", f"{where}::{{lambda(int)#1}}"

    def value(fmt, v):
        return struct.pack(fmt, v).hex()
    # In the order the lambda types were first registered (inner, f), each in jit_variable order.
    assert captures(proc, "first") == [(inner, "0", "0", "3", value("<i", 7)),
                                       (f, "1", "4", "3", value("<i", 3)), (f, "2", "8", "12", value("<d", 0.5))]
    assert captures(proc, "second") == [(inner, "0", "0", "3", value("<i", 7)),
                                        (f, "1", "4", "3", value("<i", 5)), (f, "2", "8", "12", value("<d", 0.25))]
    assert captures(proc, "third") == captures(proc, "second")


def test_lambda_calls_reach_the_proteus_runtime(lambda_app, tmp_path):
    """With the Proteus runtime loaded (a stand-in preloaded after the hook) each call is
    forwarded as the app made it, and the hook keeps its own view all the same."""
    app, kernel = lambda_app
    subprocess.run(["g++", "-shared", "-fPIC", str(FIXTURES / "hook" / "proteus_lambda_standin.cpp"), "-o",
                    str(tmp_path / "libstandin.so")], check=True)
    proc = run_lambda_app(app, f"{HOOK}:{tmp_path / 'libstandin.so'}")
    where = kir.demangle(kernel).split("::{lambda")[0].split("<", 1)[1]
    f = f"{where}::{{lambda()#1}}"
    variables = [l.split(" ", 2)[2] for l in proc.stdout.splitlines() if l.startswith("proteus variable ")]
    assert len(variables) == 8  # 4 jit_variable calls per run
    assert variables[1] == f"{f}|3|1|4|3" and variables[5] == f"{f}|3|1|4|5"  # type INT32, Pos 1, Offset 4
    assert len([l for l in proc.stdout.splitlines() if l.startswith("proteus lambda ")]) == 7
    assert captures(proc, "second") == captures(run_lambda_app(app, str(HOOK)), "second")
