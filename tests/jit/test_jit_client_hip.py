"""The reference JIT client (libkir_jit.so) on HIP, without an AMD GPU (issue 25 §3): the HIP
counterparts of tests/jit/test_jit_client.py and test_jit_compile_on_miss.py.

The app is the Proteus-built HIP app of the hook's tests (build.py `proteus_hip_app`: a gfx90a
code object carrying the pass's `.jit.bitcode.*` sections), registered and launched through the
Proteus ABI by tests/fixtures/hook/proteus_hip_abi.py, with axpy's `float a` a runtime constant
("scalar"), one launch per "a=V". The HIP runtime is tests/fixtures/jit/hip_jit_stub.c: the
app's own launches answer hipErrorNoDevice (100); the layer's substitutes are loaded with its
hipModuleLoadData, which prints the size and FNV-1a of the code object it was given, and
launched with its hipModuleLaunchKernel (0), which prints `a`.

The key is the one kir.hashing.jit_key gives for the kernel's static hash, the code object's
target ("gfx90a"), a and the options' CONFIG with kind "code-object" (kir.jit's kind for a gfx
arch): what `kir jit compile --arch gfx90a` files its result under."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kir
from jit_rig import F32, JIT_CLIENT
from kir import jit
from kir.cache import Cache
from kir.hashing import jit_key, kernel_hashes
from kir.jit import amdgpu
from kir.jit.client import client_environment
from stub_cuda import HOOK

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCRIPT = FIXTURES / "hook" / "proteus_hip_abi.py"
AXPY = "_Z4axpyfPKfPfi"
ARCH = "gfx90a"  # build.py's proteus_hip_app: --offload-arch=gfx90a (its bundle entry's target)


def fnv(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@pytest.fixture(scope="module")
def hip_rig(built, tmp_path_factory):
    if "proteus_hip_app" not in built:
        pytest.skip("clang-22 not installed: the HIP app cannot be built")
    work = built["proteus_hip_app"].parent / ".proteus_hip_app.work"
    d = tmp_path_factory.mktemp("jit_hip")
    subprocess.run(["gcc", "-Wall", "-shared", "-fPIC", str(FIXTURES / "jit" / "hip_jit_stub.c"),
                    "-Wl,-soname,libamdhip64.so", "-o", "libamdhip64.so"], check=True, cwd=d)
    hashes, _ = kernel_hashes(kir.open(built["proteus_hip_app"]))
    # the static hash of the kernel with IR: the IR's (docs/hashing.md), as the hook computes it
    [static] = {h.static.hex for h in hashes if h.kernel == AXPY and h.code_kind == "ir"}
    return {"stub": d / "libamdhip64.so", "bundle": work / "bundle.bin", "code_object": work / "k.co",
            "static": static}


def key_for(static: str, a: float, options: jit.Options | None = None) -> str:
    """The key of a launch with `a` (the script launches with 16 bytes of dynamic shared memory)."""
    config = jit.for_target(options or jit.Options(), ARCH).config()
    return jit_key(static, ARCH, [(1, F32, struct.pack("<f", a))], shared_bytes=16, config=config)


def run_script(rig, env: dict, *values: float, command=None):
    args = [str(rig["stub"]), str(rig["bundle"]), "proteus", "scalar", *(f"a={v}" for v in values)]
    proc = subprocess.run([*(command or [sys.executable]), str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [answer] = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    return proc, json.loads(answer)


def stub(proc, what: str) -> list[str]:
    return [l[len(f"stub {what} "):] for l in proc.stdout.splitlines() if l.startswith(f"stub {what} ")]


def client_env(cache: Path, tmp_path: Path, defaults=False, **settings) -> dict:
    env = {"LD_PRELOAD": str(HOOK), "KIR_HOOK_CLIENTS": str(JIT_CLIENT),
           **client_environment(cache, stats=tmp_path / "stats.json", **settings)}
    if defaults:
        del env["KIR_JIT_CONFIG"]  # the client's built-in defaults must be Options()'s, kind code-object
    return env


@pytest.mark.parametrize("defaults", [False, True], ids=["config-from-options", "built-in-defaults"])
def test_a_cached_code_object_is_substituted_exactly_when_the_value_matches(hip_rig, tmp_path, defaults):
    cache = tmp_path / "cache"
    code = hip_rig["code_object"].read_bytes()
    Cache(cache).store(key_for(hip_rig["static"], 2.5), code, "code-object", ARCH, {"producer": "test"})
    proc, seen = run_script(hip_rig, client_env(cache, tmp_path, defaults), 2.5, 3.5, 2.5)
    stats = json.loads((tmp_path / "stats.json").read_text())
    # The hits: the cached code object, loaded once (per device) from the cache's bytes, its
    # function the launched kernel, launched through hipModuleLaunchKernel with the app's a.
    assert stub(proc, "hipModuleLoadData") == [f"bytes={len(code)} fnv={fnv(code)}"], proc.stdout + proc.stderr
    assert stub(proc, "hipModuleGetFunction") == [AXPY]
    assert stub(proc, "hipModuleLaunchKernel") == ["f=loaded grid=2 block=32 shared=16 a=2.5"] * 2
    # The miss (a = 3.5): the app's own launch (the stub's hipErrorNoDevice).
    assert seen["results"] == [0, 100, 0]
    assert (stats["launches"], stats["hits"], stats["misses"], stats["substituted"]) == (3, 2, 1, 2), stats
    misses = [l for l in proc.stderr.splitlines() if l.startswith("kir-jit: miss ")]
    assert len(misses) == 1 and f"--arch {ARCH} " in misses[0] and "--arg 1:f32:3.5 " in misses[0], proc.stderr
    assert [m["key"] for m in stats["missed"]] == [key_for(hip_rig["static"], 3.5)]


def test_an_entry_keyed_as_cuda_code_or_other_options_never_hits(hip_rig, tmp_path):
    """Regression: the client keyed every launch with CONFIG kind "cubin" (CUDA's), which no
    AMDGPU code kir.jit compiles carries; nor does a key of other options hit."""
    cache = tmp_path / "cache"
    code = hip_rig["code_object"].read_bytes()
    cubin_kind = jit_key(hip_rig["static"], ARCH, [(1, F32, struct.pack("<f", 2.5))], shared_bytes=16,
                         config=jit.Options().config())
    assert cubin_kind != key_for(hip_rig["static"], 2.5)
    Cache(cache).store(cubin_kind, code, "code-object", ARCH)
    Cache(cache).store(key_for(hip_rig["static"], 2.5, jit.Options(opt_level=2)), code, "code-object", ARCH)
    proc, seen = run_script(hip_rig, client_env(cache, tmp_path), 2.5)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["hits"] == 0 and stats["substituted"] == 0 and seen["results"] == [100]
    proc, seen = run_script(hip_rig, client_env(cache, tmp_path, options=jit.Options(opt_level=2)), 2.5)
    assert json.loads((tmp_path / "stats.json").read_text())["hits"] == 1 and seen["results"] == [0]


def test_compile_on_miss_compiles_for_the_gfx_arch_and_the_next_launch_hits(hip_rig, tmp_path, kir_cli):
    """`kir run`: the miss goes to the compile service, which compiles the kernel's IR with
    kir.jit for gfx90a (an AMDGPU code object) and stores it under the client's key; the launch
    (sync) runs it, the next one hits; a second run compiles nothing."""
    if amdgpu.find_lld() is None:
        pytest.skip("ld.lld is not installed: kir.jit cannot link an AMDGPU code object")
    cache = tmp_path / "cache"
    stats_path = tmp_path / "stats.json"

    def kir_run(*values):
        args = [str(hip_rig["stub"]), str(hip_rig["bundle"]), "proteus", "scalar", *(f"a={v}" for v in values)]
        result = kir_cli("run", "--jit-cache", cache, "--stats", stats_path, "--", sys.executable, SCRIPT, *args)
        assert result.returncode == 0, result.stdout + result.stderr
        [answer] = [l for l in result.stdout.splitlines() if l.startswith("{")]
        return result, json.loads(answer), json.loads(stats_path.read_text())

    result, seen, stats = kir_run(2.5, 2.5)
    assert seen["results"] == [0, 0], result.stdout + result.stderr
    assert (stats["misses"], stats["hits"], stats["compiled"], stats["substituted"]) == (1, 1, 1, 2), stats
    assert stats["compile_failures"] == 0 and stats["service_errors"] == 0
    key = key_for(hip_rig["static"], 2.5)
    entry = Cache(cache).lookup(key)
    assert entry is not None and entry.arch == ARCH and entry.kind == "code-object", entry
    assert entry.meta["producer"] == "kir.jit" and entry.meta["specialize.args"].startswith("1:f32:2.5"), entry.meta
    code = entry.code
    assert code[:4] == b"\x7fELF" and code[18] == 224  # e_machine EM_AMDGPU
    assert stub(result, "hipModuleLoadData") == [f"bytes={len(code)} fnv={fnv(code)}"]
    assert stub(result, "hipModuleLaunchKernel") == ["f=loaded grid=2 block=32 shared=16 a=2.5"] * 2
    # A second run finds it: nothing compiled, every launch substituted.
    result, seen, stats = kir_run(2.5)
    assert seen["results"] == [0] and stats["compile_requests"] == 0 and stats["hits"] == 1
