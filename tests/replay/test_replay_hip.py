"""Replaying a HIP launch (issue 25 §2): `kir replay --backend hip` and
`Replayer(record, backend="hip")` through hip-python, on the CPU against the HIP device
stub (tests/fixtures/hip_device_stub.c: device memory on the host, the kernel a host
function registered for its name; tests/support/hip_device.py), the record a real
gfx942 code object of tests/fixtures/hip_axpy.hip built by clang-22. The last tests
need a real AMD GPU (amd_gpu: /dev/kfd and a device HIP counts) and skip here."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hip_device import (  # noqa: F401 (hip_stub, amd_gpu: fixtures)
    AXPY,
    BASE,
    DEVICE_ARCH,
    FIXTURES,
    amd_gpu,
    axpy_hip_record,
    hip_stub,
    launches,
    python_with_stub,
    run_with_stub,
)
from kir import parse_code_object
from kir.cache import Cache
from kir.errors import OptionError, PlanError
from kir.jit.amdgpu import find_lld
from kir.jit.values import type_code
from kir.replay import Variant, plan, variant_jit_key
from kir.replay.backends import backend_name, planned_arch

KIR = [sys.executable, "-m", "kir"]


@pytest.fixture
def record(hip_stub, tmp_path):
    return axpy_hip_record(tmp_path / "rec", hip_stub["code_object"])


def replay(hip_stub, record, *options, log=None, **env):
    return run_with_stub(hip_stub, [*KIR, "replay", str(record.path), "--json", *options], log, **env)


# --- on the CPU: the stub device ----------------------------------------------------------

@pytest.mark.parametrize("backend", [["--backend", "hip"], []], ids=["hip", "auto"])
def test_a_hip_record_replays_verified_with_event_times(hip_stub, record, tmp_path, backend):
    log = tmp_path / "launches.log"
    result = replay(hip_stub, record, "--repeat", "3", *backend, log=log)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["verified"] is True and out["mismatches"] == [] and out["code"] == "code-object"
    assert out["hashes_match"] is True  # the static hash recomputed from the code object, the launch identity
    assert len(out["times_ms"]) == 3 and all(t > 0 for t in out["times_ms"])  # hipEventElapsedTime
    asked = launches(log)
    assert [(x["name"], x["grid"], x["block"], x["shared"]) for x in asked] == [(AXPY, (4, 1, 1), (256, 1, 1), 0)] * 3
    assert asked[0]["args"] == plan(record, device_arch=DEVICE_ARCH).args  # the packed buffer, `extra`


def test_a_wrong_epilogue_is_a_mismatch(hip_stub, tmp_path):
    wrong = axpy_hip_record(tmp_path / "rec", hip_stub["code_object"], wrong_epilogue=True)
    result = replay(hip_stub, wrong, "--backend", "hip")
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    assert out["verified"] is False
    [mismatch] = out["mismatches"]
    assert mismatch["address"] == BASE + (1 << 21) and mismatch["first_offset"] < 4 and mismatch["differing_bytes"] > 0


def test_the_module_global_is_restored_by_name(hip_stub, tmp_path):
    """`launches` starts at the recorded prologue (41) in the loaded module: the
    kernel's +1 then matches the epilogue (42), every repeat."""
    record = axpy_hip_record(tmp_path / "rec", hip_stub["code_object"], launches_before=41)
    result = replay(hip_stub, record, "--repeat", "2")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verified"] is True


VARIANT = """
import json, struct, sys
from kir.record import Record
from kir.replay import Replayer, Variant
record = Record.load(sys.argv[1] if len(sys.argv) > 1 else {path!r})
with Replayer(record, backend="hip") as r:
    print(r.device_arch)
    out = r.run(grid=(8, 1, 1), block=(128, 1, 1))
    print(json.dumps([out.verified, out.variant, list(out.block), len(out.times_ms)]))
    short = r.run(grid=(1, 1, 1), block=(128, 1, 1))
    print(json.dumps([short.verified, [m.address for m in short.mismatches]]))
    v = r.run(Variant(block=(64, 1, 1), grid=(16, 1, 1), warmup=1, repeat=2))
    print(json.dumps([v.verified, v.compiled, v.jit_key, v.code_kind, len(v.times_ms)]))
"""


def test_a_variant_of_another_block_is_launched_with_it(hip_stub, record, tmp_path):
    """The launch configurations asked of the Replayer reach hipModuleLaunchKernel as
    they are: 8x128 and 16x64 cover the 1000 elements (verified), 1x128 leaves y's
    tail as it was (a mismatch); the stub logs each launch it was asked for."""
    log = tmp_path / "launches.log"
    result = python_with_stub(hip_stub, VARIANT.format(path=str(record.path)), log)
    assert result.returncode == 0, result.stderr
    arch, wider, short, variant = result.stdout.splitlines()
    assert arch == DEVICE_ARCH  # hipGetDeviceProperties' gcnArchName (hipDeviceProp_tR0600)
    assert json.loads(wider) == [True, True, [128, 1, 1], 1]
    assert json.loads(short) == [False, [BASE + (1 << 21)]]
    assert json.loads(variant) == [True, False, None, "code-object", 2]
    asked = [(x["grid"], x["block"]) for x in launches(log)]
    assert asked == [((8, 1, 1), (128, 1, 1)), ((1, 1, 1), (128, 1, 1))] + [((16, 1, 1), (64, 1, 1))] * 3


CUDA_ONLY = """
from kir.record import Record
from kir.replay import Replayer, Variant
from kir.errors import KirError
with Replayer(Record.load({path!r}), backend="hip") as r:
    try:
        r.run(Variant(timing="graph"))
    except KirError as error:
        print(type(error).__name__, error)
"""


def test_what_only_cuda_has_is_refused_by_name(hip_stub, tmp_path):
    """CUDA graphs: refused naming what and why, before anything is launched (variants
    kir.jit compiles run on HIP too: the tests below)."""
    record = axpy_hip_record(tmp_path / "rec", hip_stub["code_object"], ir=hip_stub["ir"])
    result = python_with_stub(hip_stub, CUDA_ONLY.format(path=str(record.path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["OptionError timing 'graph': not available on HIP (this backend measures each)"]


# --- code kir.jit compiles (AMDGPU code objects) -------------------------------------------

needs_lld = pytest.mark.skipif(find_lld() is None, reason="needs ld.lld (install-system-deps.sh --tests: lld)")
F32, I32 = type_code("f32"), type_code("i32")
JIT_ARGS = [(1, "scalar", F32, False, 0, 0, 0), (4, "scalar", I32, False, 0, 0, 0)]  # a and n: runtime constants


@needs_lld
def test_code_ir_replays_the_code_object_kir_jit_compiles(hip_stub, tmp_path):
    """`kir replay --code ir` on a HIP record: kir.jit compiles the record's IR for the
    device's target-id (the stub's gcnArchName) into a code object, hipModuleLoadData
    loads it (the stub reads its symbols: the kernel and `launches`), the launch is
    verified, the global restored by name in the compiled module."""
    record = axpy_hip_record(tmp_path / "rec", hip_stub["code_object"], ir=hip_stub["ir"], launches_before=6)
    log = tmp_path / "launches.log"
    result = replay(hip_stub, record, "--code", "ir", "--repeat", "2", log=log)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["verified"] is True and out["code"] == "ir", out
    assert [(x["name"], x["block"]) for x in launches(log)] == [(AXPY, (256, 1, 1))] * 2
    p = plan(record, code="ir", device_arch=DEVICE_ARCH)
    assert p.code.reason.startswith("the kernel's LLVM IR") and f"AMDGPU code object for {DEVICE_ARCH}" in p.code.reason
    image = p.code_bytes()  # what was loaded: kir.jit's code object, not the recorded one
    assert image != hip_stub["code_object"].read_bytes()
    assert [k.name for k in parse_code_object(image).kernels] == [AXPY]


SPECIALIZED = """
import json, sys
from kir.record import Record
from kir.replay import Replayer, Variant
record = Record.load({path!r})
variant = Variant(args="jit", specialize_block=True, bounds=(256, 2), repeat=2)
with Replayer(record, backend="hip", cache={cache!r}) as r:
    for _ in range(2):
        v = r.run(variant)
        print(json.dumps([v.verified, v.compiled, v.cached, v.code_kind, v.jit_key, v.resources.max_threads]))
"""


@needs_lld
def test_a_specialized_variant_runs_amdgpu_code_kir_jit_compiled(hip_stub, tmp_path):
    """A variant that specializes a and n, the block and launch bounds (256, 2): kir.jit
    compiles it for the device's target-id ("amdgpu-flat-work-group-size"="1,256",
    .max_flat_workgroup_size 256 in the code object), the stub loads and runs it
    (verified), the second run reuses it; it is stored in the cache under the JIT key
    the client computes on that device, with the device's whole target-id."""
    record = axpy_hip_record(tmp_path / "rec", hip_stub["code_object_plain"], ir=hip_stub["ir_plain"],
                             jit_args=JIT_ARGS, launches_global=False)
    log, cache = tmp_path / "launches.log", tmp_path / "cache"
    result = python_with_stub(hip_stub, SPECIALIZED.format(path=str(record.path), cache=str(cache)), log)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    key = variant_jit_key(record, Variant(args="jit", specialize_block=True, bounds=(256, 2)), DEVICE_ARCH)
    assert first == [True, True, False, "code-object", key, [256, 1, 1]]
    assert second == [True, True, True, "code-object", key, [256, 1, 1]]
    assert key != variant_jit_key(record, Variant(args="jit", specialize_block=True, bounds=(256, 2)), "gfx942")
    entry = Cache(str(cache)).lookup(key)
    assert (entry.kind, entry.arch, entry.meta["config.kind"]) == ("code-object", DEVICE_ARCH, "code-object")
    assert entry.meta["specialize.bounds"] == "256,2"
    [kernel] = parse_code_object(entry.code).kernels
    assert kernel.name == AXPY and list(kernel.max_threads) == [256, 1, 1]
    assert [(x["block"], x["args"]) for x in launches(log)] == [((256, 1, 1), plan(record, device_arch=DEVICE_ARCH).args)] * 6


def test_a_recording_of_hip_launches_replays_with_all(hip_stub, tmp_path):
    """`kir replay --all DIR` over HIP records: each row replayed through the HIP
    backend (auto), the wrong one failed, exit 1."""
    axpy_hip_record(tmp_path / "rec", hip_stub["code_object"])
    axpy_hip_record(tmp_path / "rec", hip_stub["code_object"], grid=(8, 1, 1), block=(128, 1, 1), wrong_epilogue=True)
    result = run_with_stub(hip_stub, [*KIR, "replay", "--all", str(tmp_path / "rec"), "--json"])
    assert result.returncode == 1, result.stderr
    rows = json.loads(result.stdout)["records"]
    assert sorted((r["status"], r["code"]) for r in rows) == [("failed", "code-object"), ("passed", "code-object")]


def test_no_hip_device_is_exit_2(hip_stub, record):
    result = replay(hip_stub, record, STUB_HIP_DEVICES="0")
    assert result.returncode == 2
    assert "no HIP device: hipInit: hipErrorNoDevice" in result.stderr, result.stderr


def test_the_recorded_addresses_taken_are_an_error(hip_stub, record):
    """A process where the recorded window is already mapped: hipMemAddressReserve
    answers elsewhere and the replay says so (VA-stable or not at all)."""
    code = (f"import mmap, ctypes, sys\nlibc = ctypes.CDLL(None)\nlibc.mmap.restype = ctypes.c_void_p\n"
            f"libc.mmap(ctypes.c_void_p({BASE}), 1 << 21, 0, 0x22 | 0x100000, -1, 0)\n"  # MAP_FIXED_NOREPLACE
            f"from kir.cli import main\nsys.exit(main(['replay', {str(record.path)!r}]))")
    result = python_with_stub(hip_stub, code)
    assert result.returncode == 2
    assert f"hipMemAddressReserve asked for {BASE:#x}" in result.stderr and "taken in this process" in result.stderr


def test_without_hip_python_the_install_hint(record):
    code = ("import sys\nsys.modules['hip'] = None\nfrom kir.errors import KirError\nfrom kir.record import Record\n"
            "from kir.replay import Replayer\ntry:\n    Replayer(Record.load(sys.argv[1]))\n"
            "except KirError as e:\n    print(type(e).__name__, e)\n")
    result = subprocess.run([sys.executable, "-c", code, str(record.path)], capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("NoDeviceError replaying on an AMD GPU: hip-python is not installed: pip install "), \
        result.stdout + result.stderr
    assert "[hip]'" in result.stdout


# --- the plan (no device) ------------------------------------------------------------------

def test_auto_picks_hip_for_a_code_object_and_plans_for_its_target(hip_stub, record, tmp_path):
    assert backend_name(record) == "hip" and backend_name(record, "cuda") == "cuda"
    with pytest.raises(OptionError, match="backend 'rocm'"):
        backend_name(record, "rocm")
    assert planned_arch(record) == "gfx942"
    p = plan(record, device_arch=DEVICE_ARCH)
    assert (p.code.kind, p.code.arch) == ("code-object", "gfx942") and p.hashes_match
    assert p.code_bytes() == hip_stub["code_object"].read_bytes()
    printed = subprocess.run([*KIR, "replay", str(record.path), "--plan"], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert "code      code-object: the AMDGPU code object the launch ran (gfx942" in printed.stdout


@pytest.mark.parametrize("device, why", [
    ("gfx90a:sramecc+:xnack-", "is for gfx942, the device is gfx90a"),
    ("sm_90", "is for gfx942, the device is sm_90"),
])
def test_a_code_object_for_another_processor_is_a_plan_error(record, device, why):
    with pytest.raises(PlanError, match=why):
        plan(record, device_arch=device)


def test_a_feature_the_code_object_fixes_must_agree(hip_stub, tmp_path):
    """A code object built for gfx942:xnack+ does not load on an xnack- device; one that
    leaves xnack unset ("any") loads on either (LLVM AMDGPUUsage, Target ID)."""
    record = axpy_hip_record(tmp_path / "rec", hip_stub["code_object"])
    record.kernel.image.arch = "gfx942:xnack+"
    with pytest.raises(PlanError, match=r"gfx942:xnack\+ \(xnack\+\), the device is gfx942:sramecc\+:xnack-"):
        plan(record, device_arch=DEVICE_ARCH)
    assert plan(record, device_arch="gfx942:sramecc-:xnack+").code.kind == "code-object"


# --- on a real AMD GPU (skips here) ---------------------------------------------------------

def test_a_hip_record_replays_on_an_amd_gpu(amd_gpu, tmp_path):
    """The same axpy built for this GPU's processor, recorded by hand as above, replayed
    by the real ROCm runtime: verified, with event times; another block verified too."""
    from hip import hip
    properties = hip.hipDeviceProp_t()
    hip.hipGetDeviceProperties(properties, 0)
    arch = properties.gcnArchName.decode().split(":")[0]
    code_object = tmp_path / "axpy.co"
    subprocess.run(["clang-22", "-x", "hip", "-nogpulib", "-nogpuinc", "-I", str(FIXTURES), f"--offload-arch={arch}",
                    "--cuda-device-only", "--no-gpu-bundle-output", "-O2", str(FIXTURES / "hip_axpy.hip"),
                    "-o", str(code_object)], check=True)
    record = axpy_hip_record(tmp_path / "rec", code_object, arch=arch)
    from kir.replay import Replayer
    with Replayer(record) as replayer:
        assert replayer.backend.name == "hip"
        result = replayer.run(repeat=3)
        assert result.verified, result.mismatches
        assert len(result.times_ms) == 3 and all(t > 0 for t in result.times_ms)
        assert replayer.run(grid=(8, 1, 1), block=(128, 1, 1)).verified
