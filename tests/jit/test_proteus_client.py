"""The Proteus-style C++ client (examples/proteus_client, docs/adopting-proteus.md), built
against the installed kir package (find_package(kir CONFIG)) and LLVM 22, LLVM linked in:
at a launch of a kernel with a runtime constant it takes the IR, the key and the values from
kir, specializes with its own LLVM pipeline (the constant, the dims, the launch bounds, the
device global through `NAME$ptr`), stores the PTX in kir's cache and claims the launch with
it; `on_loaded` writes `NAME$ptr`. On the CPU over the stub runtimes (stub_cuda, jit_rig: the
reference client's rig) with the fixture's device code (proteus_client_app.cu, its IR embedded
as the Proteus pass embeds it); on the GPU with the same fixture as an app.

On a GPU machine without LLVM, PROTEUS_CLIENT_LIB names a client built elsewhere (it carries
LLVM inside: test_the_client_carries_llvm_inside)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

import jit_rig
import kir
import stub_cuda as override
from build import rpath  # tests/support/build.py
from kir.cache import Cache
from kir.hashing import jit_key, kernel_hashes

pytestmark = pytest.mark.slow  # building the client links LLVM: a minute or more

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "proteus_client"
LLVM_DIR = Path("/usr/lib/llvm-22/lib/cmake/llvm")
KERNEL = "_Z6scaledfPKfPfi"
F32 = 11  # kir_arg_type
MAX_CLIENT_BYTES = 40 << 20  # what the lead carries to the GPU machine
DEVICE_ADDRESS = 0xD0000100  # where the stub runtime says the app's `offset` lives


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Path:
    """libproteus_client.so, configured and built as a downstream project would."""
    if os.environ.get("PROTEUS_CLIENT_LIB"):
        return Path(os.environ["PROTEUS_CLIENT_LIB"])
    if not (LLVM_DIR / "LLVMConfig.cmake").exists():
        pytest.skip("LLVM 22's CMake package is not installed (llvm-22-dev)")
    out = tmp_path_factory.mktemp("proteus-client")
    for args in (["cmake", "-S", EXAMPLE, "-B", out, "-G", "Ninja", f"-Dkir_DIR={kir.cmake_dir()}",
                  f"-DLLVM_DIR={LLVM_DIR}"], ["cmake", "--build", out]):
        result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out / "libproteus_client.so"


# jit_rig's driver (a device, sm_90, device reads) with what relinking needs: a module's
# global (one 8-byte slot per name) and host-to-device copies, both printed.
DRIVER = jit_rig.DRIVER + r"""
static unsigned long long slots[8]; static char slot_names[8][64]; static int nslots;
int cuModuleGetGlobal_v2(unsigned long long* d, size_t* bytes, void* m, const char* name) {
  (void)m; printf("stub cuModuleGetGlobal %s\n", name);
  if (nslots == 8) return 500;
  snprintf(slot_names[nslots], sizeof slot_names[0], "%s", name);
  *d = (unsigned long long)&slots[nslots++]; *bytes = 8; return 0;
}
int cuMemcpyHtoD_v2(unsigned long long d, const void* from, size_t n) {
  memcpy((void*)d, from, n);
  for (int i = 0; i < nslots; ++i)
    if (d == (unsigned long long)&slots[i]) printf("stub cuMemcpyHtoD %s=0x%llx\n", slot_names[i], slots[i]);
  return 0;
}
"""
# The stub runtime with device variables: registered, and found at DEVICE_ADDRESS.
RUNTIME = override.STUB_RUNTIME.replace(
    "int cudaGetSymbolAddress(void** d, const void* h) { (void)d; (void)h; return 1; }",
    "void __cudaRegisterVar(void** h, char* host, char* dev, const char* name, int ext, size_t size, int c,\n"
    "                       int g) { (void)h; (void)host; (void)dev; (void)name; (void)ext; (void)size; (void)c;"
    " (void)g; }\n"
    f"int cudaGetSymbolAddress(void** d, const void* h) {{ (void)h; *d = (void*){DEVICE_ADDRESS:#x}ull; return 0; }}")
assert RUNTIME != override.STUB_RUNTIME
# jit_rig's app (`a` registered as a runtime constant through the Proteus ABI), launching the
# fixture's kernel, with its device variable `offset` registered as nvcc's host code does.
APP = jit_rig.APP.replace("AXPY", KERNEL).replace(
    '#include "app_prelude.h"\n',
    '#include "app_prelude.h"\n'
    "void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int);\n"
    "static float offset_host;\n").replace(
    "  void* module = 0; void* f = 0;\n",
    '  __cudaRegisterVar(h, (char*)&offset_host, (char*)"offset", "offset", 0, sizeof offset_host, 0, 0);\n'
    "  void* module = 0; void* f = 0;\n")
assert "__cudaRegisterVar(h" in APP and "static float offset_host" in APP


@pytest.fixture(scope="module")
def rig(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("proteus-client-rig")
    override.build_stub_libraries(d, DRIVER, runtime=RUNTIME)
    (d / "app.c").write_text(APP)
    subprocess.run(["gcc", "-Wall", "app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d),
                    "-o", "app"], check=True, cwd=d)
    fatbin = built["proteus_client_app"].parent / ".proteus_client_app.work" / "proteus_client.fatbin"
    return d, fatbin, built["kernels_sm90.cubin"]


def run(rig, client, cache: Path, tmp_path: Path, launches="r", clients=None, app=None, **env_extra):
    """The rig's app (or `app`) under the hook with `client` (or `clients`); its stats (None: none written)."""
    d, fatbin, cubin = rig
    stats = tmp_path / "stats.json"
    stats.unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(clients or client), "KIR_HOOK_ARCH": "sm_90", "PROTEUS_CACHE_DIR": str(cache),
           "PROTEUS_CLIENT_STATS": str(stats), **env_extra}
    proc = subprocess.run([app or d / "app", fatbin, cubin, launches], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads(stats.read_text()) if stats.exists() else None


def test_a_miss_is_specialized_cached_and_claimed_and_a_second_run_hits(rig, client, tmp_path):
    cache = tmp_path / "cache"
    proc, stats = run(rig, client, cache, tmp_path)
    assert stats["compiles"] == 1 and stats["claims"] == 1 and stats["compile_failures"] == 0, (stats, proc.stderr)
    # The substitute ran, through the driver, by the kernel's own name, with the app's arguments.
    assert f"stub cuLaunchKernel f={KERNEL} grid=4 block=32 shared=16 stream=0x5 a=2.5" in proc.stdout, proc.stdout
    assert "stub cudaLaunchKernel" not in proc.stdout
    # on_loaded relinked the device global: offset$ptr holds the app's variable's address.
    assert "stub cuModuleGetGlobal offset$ptr" in proc.stdout
    assert f"stub cuMemcpyHtoD offset$ptr={DEVICE_ADDRESS:#x}" in proc.stdout, proc.stdout
    assert stats["relinked_writes"] == 1
    [compiled] = stats["compiled"]
    assert compiled["kernel"] == KERNEL and compiled["relinked"] == "offset"

    # In kir's cache: PTX for sm_90 under the client's key, specialized.
    [entry] = Cache(cache).entries()
    assert entry.key == compiled["key"] and entry.kind == "ptx" and entry.arch == "sm_90"
    assert entry.meta["producer"] == "proteus-client" and entry.meta["relinked-globals"] == "offset"
    ptx = entry.code.rstrip(b"\0").decode()
    assert f".entry {KERNEL}" in ptx
    assert f"{KERNEL}_param_0]" not in ptx, "the argument `a` is still loaded"
    assert "0f40200000" in ptx, "2.5f is not in the code"  # the constant, folded in
    assert "%ntid" not in ptx and "%nctaid" not in ptx, "blockDim / gridDim are still read"
    assert ".maxntid 32" in ptx  # the launch bounds
    assert "[offset$ptr]" in ptx  # the global is read through the pointer on_loaded writes
    assert ".global .align 4 .f32 offset;" not in ptx  # not a copy of its own

    proc, stats = run(rig, client, cache, tmp_path)
    assert stats["compiles"] == 0 and stats["hits"] == 1 and stats["claims"] == 1, stats
    assert f"stub cuLaunchKernel f={KERNEL}" in proc.stdout
    assert f"stub cuMemcpyHtoD offset$ptr={DEVICE_ADDRESS:#x}" in proc.stdout  # relinked in the new process too


def test_the_key_is_the_one_kir_computes_for_the_same_configuration(rig, client, tmp_path):
    """The client's key is kir_jit_key's for its configuration: Python's kir.hashing.jit_key
    and the reference client (libkir_jit.so, given the same CONFIG records, dims and bounds)
    compute the same one for this launch."""
    cache = tmp_path / "cache"
    _, stats = run(rig, client, cache, tmp_path)
    [compiled] = stats["compiled"]
    [entry] = Cache(cache).entries()
    config = [("producer", b"proteus-client"), ("compiler", entry.meta["compiler"].encode()), ("opt", b"3"),
              ("codegen-opt", b"3"), ("specialize", b"args,dims,bounds"), ("kind", b"ptx")]
    _, fatbin, _ = rig
    hashes, _ = kernel_hashes(kir.open(fatbin))
    static = {h.static.hex for h in hashes if h.kernel == KERNEL and h.target == "sm_90"}
    keys = {jit_key(s, "sm_90", [(1, F32, struct.pack("<f", 2.5))], grid=(4, 1, 1), block=(32, 1, 1),
                    shared_bytes=16, bounds=(32, 0), config=config) for s in static}
    assert compiled["key"] in keys
    # The client declared how it keys (docs/jit.md, "Declaring a client"): what `kir tune` reads.
    from kir.jit.clients import declared
    [descriptor], warnings = declared(cache)
    assert not warnings and descriptor.name == "proteus-client" and list(descriptor.config) == config
    assert (descriptor.specialize_args, descriptor.specialize_grid, descriptor.specialize_block, descriptor.bounds,
            descriptor.kind) == (True, True, True, "launch", "ptx")
    reference_env = {"KIR_JIT_CACHE": str(tmp_path / "empty"), "KIR_JIT_SPECIALIZE": "grid,block",
                     "KIR_JIT_BOUNDS": "32,0", "KIR_JIT_STATS": str(tmp_path / "reference.json"),
                     "KIR_JIT_CONFIG": ",".join(f"{k}={v.hex()}" for k, v in config)}
    run(rig, client, cache, tmp_path, clients=jit_rig.JIT_CLIENT, **reference_env)
    reference = json.loads((tmp_path / "reference.json").read_text())
    assert compiled["key"] in [m["key"] for m in reference["missed"]], reference


def test_proteus_knobs_steer_the_specialization_and_enter_the_key(rig, client, tmp_path):
    """PROTEUS_SPECIALIZE_DIMS=0 and PROTEUS_SPECIALIZE_LAUNCH_BOUNDS=0 (Proteus's Config.h
    knobs): the code reads gridDim / blockDim and has no launch bounds, the argument is still
    folded, and it is a different cache entry (the key covers the configuration);
    PROTEUS_SPECIALIZE_ARGS=0: the argument is loaded."""
    cache = tmp_path / "cache"
    _, default = run(rig, client, cache, tmp_path)
    _, plain = run(rig, client, cache, tmp_path, PROTEUS_SPECIALIZE_DIMS="0", PROTEUS_SPECIALIZE_LAUNCH_BOUNDS="0")
    assert plain["compiles"] == 1 and plain["claims"] == 1, plain
    assert plain["compiled"][0]["key"] != default["compiled"][0]["key"]
    ptx = Cache(cache).lookup(plain["compiled"][0]["key"]).code.decode()
    assert "%ntid.x" in ptx and "%nctaid.x" in ptx and ".maxntid" not in ptx
    assert f"{KERNEL}_param_0]" not in ptx and "0f40200000" in ptx
    _, unspecialized = run(rig, client, cache, tmp_path, PROTEUS_SPECIALIZE_ARGS="0")
    ptx = Cache(cache).lookup(unspecialized["compiled"][0]["key"]).code.decode()
    assert f"{KERNEL}_param_0]" in ptx and "0f40200000" not in ptx  # PROTEUS_SPECIALIZE_ARGS=0: `a` is loaded


def test_an_array_behind_a_pointer_becomes_the_values_kir_read(rig, client, tmp_path):
    """`x` registered as a runtime-constant ARRAY of 4 floats (Proteus's
    __proteus_create_runtime_constant_info_array_const_size): kir reads the elements from
    device memory once, for the key and, through kir_jit_key_input.values, for the client,
    which puts them in a constant global the argument is replaced by."""
    d, fatbin, cubin = rig
    app = APP.replace("const float* x = 0;", "static const float xs[4] = {1.5f, 2.5f, 3.5f, 4.5f}; const float* x = xs;")
    app = app.replace(
        "  void* infos[1] = {scalar(5, 0)};\n",
        '  void* (*array)(int, int, int, int) = (void* (*)(int, int, int, int))dlsym(RTLD_DEFAULT,\n'
        '      "__proteus_create_runtime_constant_info_array_const_size");\n'
        "  void* infos[2] = {scalar(5, 0), array(11 /* ARRAY */, 1, 4, 5 /* FLOAT */)};\n").replace(
        "infos, 1);", "infos, 2);")
    assert "array(11" in app and "infos, 2);" in app and "xs[4]" in app
    (tmp_path / "array.c").write_text(app)
    for header in override.HEADERS:
        (tmp_path / header).write_text((d / header).read_text())
    subprocess.run(["gcc", "-Wall", "array.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d),
                    "-o", "array"], check=True, cwd=tmp_path)
    cache = tmp_path / "cache"
    proc, stats = run(rig, client, cache, tmp_path, app=tmp_path / "array")
    assert stats["compiles"] == 1 and stats["claims"] == 1 and stats["errors"] == 0, (stats, proc.stderr)
    assert f"stub cuLaunchKernel f={KERNEL}" in proc.stdout
    [entry] = Cache(cache).entries()
    ptx = entry.code.rstrip(b"\0").decode()
    assert f"{KERNEL}_param_1]" not in ptx, "the pointer `x` is still loaded"
    assert "0, 0, 192, 63, 0, 0, 32, 64, 0, 0, 96, 64, 0, 0, 144, 64" in ptx, ptx  # 1.5f, 2.5f, 3.5f, 4.5f


def test_without_ir_the_original_runs(client, tmp_path, built):
    """jit_rig's own rig (kernels.fatbin: no IR embedded): the compile of each key (two values
    of `a`) fails, said once on stderr; nothing is claimed or cached and the app's own kernel runs."""
    d = tmp_path / "rig"
    d.mkdir()
    override.build_stub_libraries(d, DRIVER)
    (d / "app.c").write_text(jit_rig.APP.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", "app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d),
                    "-o", "app"], check=True, cwd=d)
    cache = tmp_path / "cache"
    proc, stats = run((d, built["kernels.fatbin"], built["kernels_sm90.cubin"]), client, cache, tmp_path,
                      launches="rr")
    assert stats["claims"] == 0 and stats["compiles"] == 0 and stats["compile_failures"] == 2, stats
    assert proc.stdout.count("stub cudaLaunchKernel ") == 2 and "stub cuLaunchKernel" not in proc.stdout
    assert proc.stderr.count(f"proteus-client: error: {override.AXPY}: compile: {override.AXPY}: no IR") == 1
    assert Cache(cache).entries() == []


def test_proteus_disable_claims_nothing(rig, client, tmp_path):
    cache = tmp_path / "cache"
    proc, stats = run(rig, client, cache, tmp_path, PROTEUS_DISABLE="1")
    assert stats is None and "stub cudaLaunchKernel " in proc.stdout and "stub cuLaunchKernel" not in proc.stdout
    assert not cache.exists() or Cache(cache).entries() == []


def test_the_client_carries_llvm_inside(client):
    """The library needs no LLVM where it runs (the GPU machine has none): LLVM is linked in,
    stripped, and small enough to carry."""
    size = client.stat().st_size
    print(f"libproteus_client.so: {size} bytes ({size / 2**20:.1f} MiB)")
    assert size <= MAX_CLIENT_BYTES
    dynamic = subprocess.run(["readelf", "-d", client], capture_output=True, text=True, check=True).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    assert not any("LLVM" in n or "stdc++" in n for n in needed), needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", client], capture_output=True, text=True, check=True)
    assert [line.split()[-1] for line in symbols.stdout.splitlines()] == ["kir_hook_client_entry"]


def test_on_the_gpu_the_specialized_kernel_runs_and_changes_nothing(gpu, built, client, tmp_path):
    """The fixture app on the GPU: every launch runs the client's specialized code (two
    values of `a`: two compiles, then hits), `offset` is read through the relinked pointer,
    and the output is bitwise the plain run's; a second run compiles nothing."""
    app = built["proteus_client_app"]
    plain = subprocess.run([app, "10"], capture_output=True, text=True, check=True)
    assert plain.stdout.startswith("checksum ")
    cache, stats_path = tmp_path / "cache", tmp_path / "stats.json"
    env = {**os.environ, "LD_PRELOAD": str(override.HOOK), "KIR_HOOK_CLIENTS": str(client),
           "PROTEUS_CACHE_DIR": str(cache), "PROTEUS_CLIENT_STATS": str(stats_path)}
    for compiles in (2, 0):
        result = subprocess.run([app, "10"], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        stats = json.loads(stats_path.read_text())
        assert result.stdout == plain.stdout, (stats, result.stderr[-3000:])
        assert stats["compiles"] == compiles and stats["claims"] == 11 and stats["errors"] == 0, stats
        assert stats["relinked_writes"] == 2, stats  # one module per value of `a`


def test_on_the_gpu_the_client_runs_what_kir_tune_handed_off(gpu, built, client, kir_cli, tmp_path):
    """Issue 24 §1: the Proteus-style client declares itself in its cache (a first run);
    `kir tune --jit-cache` over a fresh cache holding only that declaration stores the
    winner under the client's key; the client then finds it at every launch (hits, no
    compile of its own), and the app's output is the plain run's."""
    import shutil
    app, args = built["jit_app"], ["40", "2.5", str(1 << 20)]
    plain = subprocess.run([app, *args], capture_output=True, text=True, check=True)
    own, cache, stats_path = tmp_path / "own", tmp_path / "cache", tmp_path / "stats.json"
    env = {**os.environ, "LD_PRELOAD": str(override.HOOK), "KIR_HOOK_CLIENTS": str(client),
           "PROTEUS_CLIENT_STATS": str(stats_path)}
    first = subprocess.run([app, *args], capture_output=True, text=True, env={**env, "PROTEUS_CACHE_DIR": str(own)},
                           timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copytree(own / ".jit" / "clients", cache / ".jit" / "clients")  # the declaration alone
    recorded = kir_cli("record", "--max-per-kernel", "1", "-o", tmp_path / "rec", "--", app, *args)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    tuned = kir_cli("tune", tmp_path / "rec", "--preset", "compiler", "--trials", "6", "--seed", "1", "--jit-cache",
                    cache, "--store", "always", "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    (r,) = json.loads(tuned.stdout)["records"]
    handed = {h["client"]: h for h in r["handoffs"]}
    assert handed["proteus-client"]["stored"], handed
    result = subprocess.run([app, *args], capture_output=True, text=True, env={**env, "PROTEUS_CACHE_DIR": str(cache)},
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(stats_path.read_text())
    # jit_app's 40 launches of a = 2.5 are the recorded launch's key: found, never compiled by the client
    # (its other launches, other values of `a`, it compiles itself)
    assert handed["proteus-client"]["key"] not in [c["key"] for c in stats["compiled"]], stats
    assert stats["hits"] >= 40 and stats["errors"] == 0, stats
    assert Cache(cache).lookup(handed["proteus-client"]["key"]).meta["tuned.client"] == "proteus-client"
    assert result.stdout == plain.stdout
