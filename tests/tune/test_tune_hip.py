"""`kir tune` on a HIP record (issue 25 §4), on the CPU: the trials replayed through
the HIP backend on the host-memory HIP device stub (tests/support/hip_device.py), each
trial's code an AMDGPU code object kir.jit compiles for the device's target-id, the
winner handed to the JIT client's cache under the key the client computes there, the
launch bounds (Mneme's max_threads / min_blocks_per_sm) reaching the code object as
amdgpu-flat-work-group-size / amdgpu-waves-per-eu. The last test needs a real AMD GPU
(amd_gpu) and skips here."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("optuna")

from hip_device import (  # noqa: E402,F401 (hip_stub, amd_gpu: fixtures)
    ARCH,
    AXPY,
    DEVICE_ARCH,
    FIXTURES,
    amd_gpu,
    axpy_hip_record,
    hip_stub,
    launches,
    run_with_stub,
)
from kir import parse_code_object  # noqa: E402
from kir.cache import Cache  # noqa: E402
from kir.jit.amdgpu import find_lld  # noqa: E402
from kir.jit.values import type_code  # noqa: E402
from kir.tune import Client, Space  # noqa: E402

KIR = [sys.executable, "-m", "kir"]
JIT_ARGS = [(1, "scalar", type_code("f32"), False, 0, 0, 0), (4, "scalar", type_code("i32"), False, 0, 0, 0)]
#: the compile options and Mneme's launch bounds at the recorded launch (block 256)
SPACE = {"preset": "compiler", "opt_level": [2, 3], "codegen_opt": [3], "fp_contract": ["auto"],
         "launch_bounds": [True], "max_threads": [256], "min_blocks": [0, 2], "warmup": 0, "repeat": 2}

pytestmark = pytest.mark.skipif(find_lld() is None, reason="needs ld.lld (install-system-deps.sh --tests: lld)")


@pytest.fixture
def record(hip_stub, tmp_path):
    """axpy without a module global (code the hand-off may store), a and n runtime constants."""
    return axpy_hip_record(tmp_path / "rec", hip_stub["code_object_plain"], ir=hip_stub["ir_plain"],
                           jit_args=JIT_ARGS, launches_global=False)


def test_the_space_on_hip(record):
    """CUDA graphs and ptxas's register limit are NVIDIA's: on a HIP record the trials
    are timed "each" and maxrregcount is [0]; a CUDA record's space is as it was."""
    space = Space.from_dict(SPACE).for_device(record)
    assert (space.timing, space.maxrregcount) == ("each", [0])
    assert space.source.endswith("on HIP: timing each, maxrregcount [0]")
    assert space.for_device(record) is space


def test_activity_timing_on_a_hip_record_runs_timed_each_without_cupti(hip_stub, record, tmp_path):
    """`timing: activity` is CUPTI's: a HIP record's trials are timed "each", and kir tune
    does not ask for cupti-python first (it did, before the space was made for the device)."""
    try:
        import cupti  # noqa: F401
        pytest.skip("cupti-python is installed: the question is not asked")
    except ImportError:
        pass
    space, log = tmp_path / "space.json", tmp_path / "launches.log"
    space.write_text(json.dumps(SPACE | {"timing": "activity"}))
    out = run_with_stub(hip_stub, [*KIR, "tune", str(record.path), "--space", str(space), "--trials", "1", "--seed",
                                   "1", "--json"], log)
    assert out.returncode == 0, out.stderr
    [r] = json.loads(out.stdout)["records"]
    assert r["space"]["timing"] == "each" and "cupti" not in out.stderr


def test_tune_a_hip_record_and_hand_the_winner_to_the_client(hip_stub, record, tmp_path):
    """kir tune on the stub HIP device: every trial compiled by kir.jit for the device's
    target-id (the stub's gcnArchName), replayed and verified; the best stored in the
    cache under the key a JIT client specializing the block computes for that launch —
    with the arch the hook reports to it, the target-id of the code object the launch
    ran ("gfx942", kir_hook_launch.arch), and that arch on the entry, which the client
    compares — the code object's launch bounds those of the trial (max flat work-group
    size 256). The device's whole target-id keys nothing: no client asks with it."""
    space, cache, log = tmp_path / "space.json", tmp_path / "cache", tmp_path / "launches.log"
    space.write_text(json.dumps(SPACE))
    out = run_with_stub(hip_stub, [*KIR, "tune", str(record.path), "--space", str(space), "--trials", "4", "--seed",
                                   "1", "--jit-cache", str(cache), "--store", "always", "--client-specialize", "block",
                                   "--json"], log)
    assert out.returncode == 0, out.stderr
    [r] = json.loads(out.stdout)["records"]
    assert r["arch"] == DEVICE_ARCH
    assert r["space"]["timing"] == "each" and r["space"]["maxrregcount"] == [0]
    assert len(r["trials"]) == 4
    for t in r["trials"]:
        result = t["result"]
        assert (result["status"], result["verified"], result["code_kind"]) == ("ok", True, "code-object"), result
        assert result["jit_key"] and result["arch"] == DEVICE_ARCH
    handoff = r["handoff"]
    assert handoff["stored"], handoff
    client = Client(specialize_block=True)
    assert record.kernel.image.arch == ARCH != DEVICE_ARCH
    assert handoff["key"] == client.key(record, ARCH)
    entry = Cache(str(cache)).lookup(client.key(record, ARCH))
    assert (entry.kind, entry.arch, entry.meta["tuned.by"]) == ("code-object", ARCH, "kir tune")
    best = next(t for t in r["trials"] if t["number"] == handoff["trial"])
    assert entry.meta["tuned.point"] == best["description"] and "bounds 256," in best["description"]
    [kernel] = parse_code_object(entry.code).kernels
    assert kernel.name == AXPY and list(kernel.max_threads) == [256, 1, 1]  # amdgpu-flat-work-group-size 1,256
    assert Cache(str(cache)).lookup(client.key(record, DEVICE_ARCH)) is None
    # the trials ran on the stub (the kernel's host function), at the recorded launch
    assert {(x["name"], x["block"]) for x in launches(log)} == {(AXPY, (256, 1, 1))}


# --- on a real AMD GPU (skips here) ---------------------------------------------------------

def test_tune_a_hip_record_on_an_amd_gpu(amd_gpu, tmp_path):
    """The same axpy built for this GPU's processor (an MI300A: gfx942), tuned on it by the
    real ROCm runtime: verified trials with event times, the winner stored under the
    client's key for the target-id of the recorded code object (what the hook reports)."""
    from hip import hip
    properties = hip.hipDeviceProp_t()
    hip.hipGetDeviceProperties(properties, 0)
    target = properties.gcnArchName.decode()
    arch = target.split(":")[0]
    built = {}
    for suffix, flags in ((".co", []), (".bc", ["-emit-llvm", "-c"])):
        path = tmp_path / f"axpy{suffix}"
        subprocess.run(["clang-22", "-x", "hip", "-nogpulib", "-nogpuinc", "-I", str(FIXTURES), f"--offload-arch={arch}",
                        "--cuda-device-only", "--no-gpu-bundle-output", "-O2", "-DKIR_AXPY_NO_GLOBAL", *flags,
                        str(FIXTURES / "hip_axpy.hip"), "-o", str(path)], check=True)
        built[suffix] = path
    record = axpy_hip_record(tmp_path / "rec", built[".co"], arch=arch, ir=built[".bc"].read_bytes(),
                             jit_args=JIT_ARGS, launches_global=False)
    space, cache = tmp_path / "space.json", tmp_path / "cache"
    space.write_text(json.dumps(SPACE | {"repeat": 10}))
    out = subprocess.run([*KIR, "tune", str(record.path), "--space", str(space), "--trials", "6", "--seed", "1",
                          "--jit-cache", str(cache), "--store", "always", "--client-specialize", "block", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    [r] = json.loads(out.stdout)["records"]
    assert r["arch"] == target
    assert all(t["result"]["verified"] and t["result"]["times_ms"] for t in r["trials"])
    assert r["handoff"]["stored"], r["handoff"]
    entry = Cache(str(cache)).lookup(Client(specialize_block=True).key(record, arch))
    assert entry is not None and (entry.kind, entry.arch) == ("code-object", arch)
