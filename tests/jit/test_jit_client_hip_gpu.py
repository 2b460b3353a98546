"""The reference JIT client on a real AMD GPU (MI250X, MI300A, ...; issue 25 §3): a HIP app
(tests/fixtures/jit/hip_jit_gpu_app.hip, built for the GPU's processor with its device IR
embedded as the Proteus pass's `.jit.bitcode.*` sections, as build.py's proteus_hip_app) run
under `kir run --jit-cache DIR --all` with the real ROCm runtime: the first launch misses, the
compile service compiles the kernel's IR for the GPU with kir.jit and stores the code object,
the layer loads it with hipModuleLoadData and every launch runs it; the app's own check of
y = 3 * a * x + 1 passes; a second run compiles nothing and hits every launch.

Skips without an AMD GPU (running.require_amd_gpu: /dev/kfd and hipGetDeviceCount > 0), the
LLVM tools or ld.lld: it has not run on AMD hardware yet (docs/hip.md). On an AMD machine:
    bash tests/run.sh tests/jit/test_jit_client_hip_gpu.py -rs"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import running  # tests/support
from build import BUNDLER, HIP, LAYOUT, rpath  # tests/support/build.py
from kir.cache import Cache
from kir.jit import amdgpu

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AXPY = "_Z4axpyfPKfPfi"


@pytest.fixture(scope="module")
def gpu_app(tmp_path_factory):
    running.require_amd_gpu()
    running.require("clang-22", "clang++-22", "llvm-objcopy-22", BUNDLER)
    if amdgpu.find_lld() is None:
        pytest.skip("ld.lld is not installed: kir.jit cannot link an AMDGPU code object")
    arch = running.amd_gpu_arch()
    assert arch, "no gfx_target_version in the KFD topology"
    library = running.real_hip_library()
    d = tmp_path_factory.mktemp("jit_hip_gpu")
    source = FIXTURES / "jit" / "hip_jit_gpu_app.hip"

    def run(*args):
        return subprocess.run([str(a) for a in args], check=True, cwd=d, capture_output=True, text=True).stdout

    run(*HIP, f"--offload-arch={arch}", "--cuda-device-only", "-emit-llvm", "-c", source, "-o", "dev.bc")
    run(*HIP, f"--offload-arch={arch}", "--cuda-device-only", "--no-gpu-bundle-output", "-c", source, "-o", "k.co")
    sections = run(sys.executable, LAYOUT, "hip-sections", "dev.bc", AXPY).split()
    run("llvm-objcopy-22", *sections, "k.co", "k_jit.co")
    run(BUNDLER, "--type=o", f"--targets=host-x86_64-unknown-linux-gnu-,hipv4-amdgcn-amd-amdhsa--{arch}",
        "--input=/dev/null", "--input=k_jit.co", "--output=bundle.bin")
    run(*HIP, f"--offload-arch={arch}", "--cuda-host-only", "-Xclang", "-fcuda-include-gpubinary", "-Xclang",
        "bundle.bin", "-c", source, "-o", "host.o")
    run("clang++-22", "host.o", f"-L{library.parent}", "-lamdhip64", *rpath(library.parent), "-o", "app")
    return d / "app", arch


def test_compile_on_miss_and_substitution_on_an_amd_gpu(gpu_app, tmp_path, kir_cli):
    app, arch = gpu_app
    plain = subprocess.run([app], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and plain.stdout.strip() == "ok", plain.stdout + plain.stderr
    cache, stats_path = tmp_path / "cache", tmp_path / "stats.json"
    result = kir_cli("run", "--jit-cache", cache, "--all", "--stats", stats_path, "--", app)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    stats = json.loads(stats_path.read_text())
    assert (stats["launches"], stats["misses"], stats["hits"], stats["compiled"], stats["substituted"]) == \
        (3, 1, 2, 1, 3), stats
    assert stats["substitute_failures"] == 0 and stats["compile_failures"] == 0, result.stderr
    # the code object kir.jit compiled for the bundle's target (the GPU's processor)
    [entry] = Cache(cache).entries()
    assert entry.kind == "code-object" and entry.arch == arch and entry.meta["producer"] == "kir.jit", entry
    result = kir_cli("run", "--jit-cache", cache, "--all", "--stats", stats_path, "--", app)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    stats = json.loads(stats_path.read_text())
    assert stats["compile_requests"] == 0 and stats["hits"] == 3 and stats["substituted"] == 3, stats
