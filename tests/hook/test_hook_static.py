"""Apps whose CUDA runtime is linked statically (nvcc's default, NVIDIA's own
libraries): the hook meets them at the driver. Such a runtime dlopen()s
libcuda.so.1, looks up `cuGetProcAddress_v2` with dlsym() on that handle and asks
it for every other entry point; the hook interposes dlsym() (libkir/hook/dlsym.cpp)
and hands out its own cuGetProcAddress, which returns its driver interposers.

Without a GPU: a stub libcuda.so.1 stands in for the driver, and a library that
looks itself up with dlsym(RTLD_NEXT) checks that every other lookup still
behaves as without the hook. On the GPU: a default nvcc build and PyTorch's
cuBLAS GEMM are traced, recorded and replayed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kir
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"

BASE = "int kir_probe(void) { return 1; }\nint cuMemFree_v2(void) { return 7; }\n"
NEXT = source("hook/hook_static_next.c")
STUB_DRIVER = source("hook/hook_static_stub_driver.c")
PROGRAM = source("hook/hook_static_program.c")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("static")
    for name, text in (("base.c", BASE), ("next.c", NEXT), ("stub.c", STUB_DRIVER), ("prog.c", PROGRAM)):
        (d / name).write_text(text)
    def cc(*args):
        subprocess.run(["gcc", *map(str, args)], check=True, cwd=d)
    cc("-shared", "-fPIC", "base.c", "-o", "libbase.so")
    cc("-shared", "-fPIC", "next.c", "-o", "libnext.so", "-ldl")
    cc("-shared", "-fPIC", "stub.c", "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1")
    cc("prog.c", "-Wl,--no-as-needed", f"-L{d}", "-lnext", "-lbase", "-ldl", *rpath(d), "-o", "prog")
    return d


def run_probe(d: Path, hooked: bool) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(d)}
    if hooked:
        env["LD_PRELOAD"] = str(HOOK)
    out = subprocess.run([d / "prog"], capture_output=True, text=True, env=env, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_the_driver_front_door_is_the_hook_s(probe):
    bare, hooked = run_probe(probe, False), run_probe(probe, True)
    stub, hook = str(probe / "libcuda.so.1"), str(HOOK.resolve())
    assert all(bare[k] == stub for k in bare if k not in ("next-probe", "base:cuMemFree_v2",
                                                         "dlsym:cuModuleLoadData"))
    # dlsym(libcuda, "cuGetProcAddress_v2") and cuGetProcAddress asked for itself (both ABIs)
    # give the hook's; the hook's returns its interposer for an entry point it has ...
    for key in ("dlsym:cuGetProcAddress_v2", "11030:cuGetProcAddress", "12000:cuGetProcAddress",
                "12000:cuLaunchKernel", "ptsz:cuLaunchKernel", "dlsym:cuLaunchKernel"):
        assert Path(hooked[key]).resolve() == HOOK.resolve(), (key, hooked[key], hook)
    # ... and the driver's own for the rest, by either way of asking.
    assert hooked["12000:cuFoo"] == hooked["dlsym:cuFoo"] == stub
    # A name the driver (here the stub) lacks is not invented, and a function of the same
    # name in another library is that library's.
    assert bare["dlsym:cuModuleLoadData"] == hooked["dlsym:cuModuleLoadData"] == "none"
    assert bare["base:cuMemFree_v2"] == hooked["base:cuMemFree_v2"] == str(probe / "libbase.so")


def test_every_other_dlsym_behaves_as_without_the_hook(probe):
    """dlsym(RTLD_NEXT) is resolved from its caller's return address: the hook's
    interposer must jump to glibc's with the caller's frame, or libnext.so would
    find its own kir_probe (2) instead of libbase.so's (1) — or none."""
    assert run_probe(probe, False)["next-probe"] == run_probe(probe, True)["next-probe"] == "1"


# A library that loads its module with cuModuleLoadData but obtains its functions in a way
# the layer does not see (cuFFT, measured on the H200): the launch's CUfunction is named by
# the driver (cuFuncGetModule, cuFuncGetName), once per unknown handle.
UNSEEN_DRIVER = source("hook/hook_static_unseen_driver.c")
UNSEEN_PROGRAM = source("hook/hook_static_unseen_program.c")


def test_a_function_the_layer_never_saw_looked_up_is_named_by_the_driver(tmp_path, built, kir_cli,
                                                                         hostile_library_path):
    (tmp_path / "stub.c").write_text(UNSEEN_DRIVER)
    (tmp_path / "prog.c").write_text(UNSEEN_PROGRAM)
    subprocess.run(["gcc", "-shared", "-fPIC", "stub.c", "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1"],
                   check=True, cwd=tmp_path)
    # dlopen() finds the stub through the program's DT_RPATH, ahead of LD_LIBRARY_PATH (on
    # the H200 the real driver's directory: it got the stub's calls and the app died, 139).
    # Not `env LD_LIBRARY_PATH=...`: the tracing client in `env` keeps the trace pipe from
    # the programs it runs, so the trace would go to stderr.
    subprocess.run(["gcc", "prog.c", "-ldl", *rpath(tmp_path), "-o", "prog"], check=True, cwd=tmp_path)
    result, events = trace_events(kir_cli, tmp_path / "prog", built["kernels_sm90.cubin"])
    assert result.returncode == 0, result.stderr
    launches = [e for e in events if e["event"] == "launch"]
    assert [e["kernel"] for e in launches] == ["_Z4axpyfPKfPfi"] * 2 + [""] * 2
    # named from the loaded cubin: its parameter layout decodes the arguments
    assert launches[0]["args"] == [hex(0x40200000), hex(0x10), hex(0x20), hex(256)]
    # asked once per unknown handle: 0x2000 (named), 0x3000 (the driver cannot name it)
    assert "module-asks 2" in result.stdout


# --- on the GPU ---------------------------------------------------------------------------

def trace_events(kir_cli, *command):
    result = kir_cli("trace", "--json", "--", *command)
    return result, [json.loads(l) for l in result.stdout.splitlines() if l.startswith('{"event"')]


def test_a_default_nvcc_build_is_traced(gpu, built, kir_cli):
    app = built["rec_vector_add_static"]
    bare = subprocess.run([app], capture_output=True, text=True)
    result, events = trace_events(kir_cli, app)
    assert result.returncode == bare.returncode == 0, result.stderr
    assert "statically" not in result.stderr
    launches = [e for e in events if e["event"] == "launch"]
    kernels = {k.name for i in kir.open(app).images if i.kind == "cubin" for k in i.kernels}
    assert launches and {e["kernel"] for e in launches} <= kernels
    assert all(e["api"].startswith("cuLaunchKernel") for e in launches)
    # the same static hash as `kir hash` for the sm_90 cubin the device loads
    hashes = [json.loads(l) for l in kir_cli("hash", "--jsonl", app).stdout.splitlines()]
    registered = {e["kernel"]: e["static"] for e in events if e["event"] == "register-kernel"}
    for name, static in registered.items():
        assert static == next(h["static"] for h in hashes if h["kernel"] == name
                              and h["image_kind"] == "cubin" and h["target"] == "sm_90")


def test_a_default_nvcc_build_is_recorded_and_replays(gpu, built, kir_cli, tmp_path):
    app = built["rec_vector_add_static"]
    bare = subprocess.run([app], capture_output=True, text=True)
    result = kir_cli("record", "-o", tmp_path / "rec", "--", app)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == bare.stdout
    listing = json.loads(kir_cli("records", tmp_path / "rec", "--json").stdout)
    assert listing["records"]
    for r in listing["records"]:
        replayed = kir_cli("replay", tmp_path / "rec" / "records" / r["file"], "--json")
        assert replayed.returncode == 0, replayed.stderr[-3000:]
        assert json.loads(replayed.stdout)["verified"] is True


TORCH_GEMM = r"""
import torch
a = torch.randn(512, 512, device="cuda")
b = a @ a
torch.cuda.synchronize()
print(float(b.sum()))
"""


def test_pytorch_cublas_gemm_is_traced(gpu, kir_cli, tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "gemm.py"
    script.write_text(TORCH_GEMM)
    result, events = trace_events(kir_cli, sys.executable, script)
    assert result.returncode == 0, result.stderr[-3000:]
    names = {e["kernel"] for e in events if e["event"] == "launch"}
    assert any("gemm" in n.lower() for n in names), sorted(names)[:20]


TORCH_FFT = r"""
import sys
import torch
x = torch.arange(int(sys.argv[1]) if len(sys.argv) > 1 else 256, device="cuda", dtype=torch.float32).to(torch.complex64)
y = torch.fft.fft(x)
torch.cuda.synchronize()
print(float(y.abs().sum()))
"""


def record_cufft(kir_cli, tmp_path, size=256):
    pytest.importorskip("torch")
    script = tmp_path / "fft.py"
    script.write_text(TORCH_FFT)
    out = tmp_path / "rec"
    result = kir_cli("record", "--kernels", "fft", "--max-per-kernel", "1", "-o", out, "--", sys.executable, script,
                     str(size))
    assert result.returncode == 0, result.stderr[-3000:]
    listing = json.loads(kir_cli("records", out, "--json").stdout)
    recorded = [r for r in listing["records"] if "fft" in r["kernel"].lower()]
    assert recorded, [r["kernel"] for r in listing["records"]]
    return out, recorded


def test_pytorch_cufft_is_traced_and_recorded(gpu, kir_cli, tmp_path):
    """cuFFT reaches the driver by handle, one entry point at a time (dlsym(libcuda,
    "cuLaunchKernel")), and obtains its functions past cuModuleGetFunction: its FFT
    kernel is traced by name with its arguments, and recorded."""
    pytest.importorskip("torch")
    script = tmp_path / "fft.py"
    script.write_text(TORCH_FFT)
    result, events = trace_events(kir_cli, sys.executable, script)
    assert result.returncode == 0, result.stderr[-3000:]
    ffts = [e for e in events if e["event"] == "launch" and "fft" in e["kernel"].lower()]
    assert ffts and all(e["api"].startswith("cuLaunchKernel") and e["args"] for e in ffts), \
        sorted({e["kernel"] for e in events if e["event"] == "launch"})[:20]
    record_cufft(kir_cli, tmp_path)


@pytest.mark.parametrize("size", [256, 1 << 20])
def test_pytorch_cufft_record_replays(gpu, kir_cli, tmp_path, size):
    """cuFFT writes its twiddle table's address into each module's `lut_sp`/`lut_dp`
    at plan time (cuModuleGetGlobal): the record holds the module's globals, so the
    replayed FFT kernels read the table (they faulted with CUDA_ERROR_ILLEGAL_ADDRESS
    while those globals were left out: issue 24 §5)."""
    out, recorded = record_cufft(kir_cli, tmp_path, size)
    for r in recorded:
        replayed = kir_cli("replay", out / "records" / r["file"], "--json")
        assert replayed.returncode == 0, replayed.stderr[-3000:]
        assert json.loads(replayed.stdout)["verified"] is True


def test_pytorch_cublas_gemm_is_recorded_and_replays(gpu, kir_cli, tmp_path):
    """cuBLAS links its own static runtime: its GEMM is recorded through the driver
    and replays bit-exactly."""
    pytest.importorskip("torch")
    script = tmp_path / "gemm.py"
    script.write_text(TORCH_GEMM)
    out = tmp_path / "rec"
    result = kir_cli("record", "--kernels", "gemm", "--max-per-kernel", "1", "-o", out, "--",
                     sys.executable, script)
    assert result.returncode == 0, result.stderr[-3000:]
    listing = json.loads(kir_cli("records", out, "--json").stdout)
    gemms = [r for r in listing["records"] if "gemm" in r["kernel"].lower()]
    assert gemms, [r["kernel"] for r in listing["records"]]
    for r in gemms:
        replayed = kir_cli("replay", out / "records" / r["file"], "--json")
        assert replayed.returncode == 0, replayed.stderr[-3000:]
        assert json.loads(replayed.stdout)["verified"] is True

