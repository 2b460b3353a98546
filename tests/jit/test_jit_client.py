"""The reference JIT client (libkir_jit.so, `kir run`), without a GPU: the stub
runtime and driver of tests/support/stub_cuda.py, and the app there with its
kernel's first argument (`float a`) registered as a runtime constant through the
Proteus ABI, as the Proteus pass does. A cache entry stored under the JIT key
that `kir.hashing.jit_key` gives for a=2.5 — the key `kir jit compile` files its
result under — must be launched instead of the original exactly for the launches
with a=2.5; any other value, or other compile options, never hits."""
from __future__ import annotations

import json
import struct
import subprocess

import pytest

import stub_cuda as override
from build import rpath  # tests/support/build.py
from jit_rig import APP, F32, JIT_CLIENT, key_for, rig, run_app, stub_lines  # noqa: F401  (rig: fixture)
from kir import jit
from kir.cache import Cache
from kir.hashing import jit_key
from kir.jit.client import client_environment


@pytest.mark.parametrize("defaults", [False, True], ids=["config-from-options", "built-in-defaults"])
def test_a_cached_key_is_launched_instead_exactly_when_the_value_matches(rig, tmp_path, defaults):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    Cache(cache).store(key_for(static, 2.5), cubin.read_bytes(), "cubin", "sm_90", {"producer": "test"})
    # a = 2.5, 3.5, 4.5, 5.5 (the app adds 1 per launch): runtime launches of the registered
    # kernel, and one (4.5) through the driver of the cubin the app loaded itself — another
    # registration, with no runtime constants: not looked up
    proc, stats = run_app(rig, cache, "rrdr", tmp_path, defaults=defaults)
    stub = stub_lines(proc)
    # The hit: the cached cubin, loaded by the layer and launched through the driver by name.
    assert stub[0].split()[1] == "cuLaunchKernel" and f"f={override.AXPY} " in stub[0] and "a=2.5" in stub[0]
    # The misses: the app's own launches.
    assert [l.split()[1] for l in stub[1:]] == ["cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernel"]
    assert stats["launches"] == 3 and stats["hits"] == 1 and stats["misses"] == 2 and stats["substituted"] == 1
    # Each missed key is said once, as the command that fills it.
    misses = [l for l in proc.stderr.splitlines() if l.startswith("kir-jit: miss ")]
    assert len(misses) == 2 and "--arg 1:f32:3.5 " in misses[0] and f"--cache {cache.resolve()}" in misses[0]
    assert [m["key"] for m in stats["missed"]] == [key_for(static, a) for a in (3.5, 5.5)]


def test_a_wrong_value_or_other_options_never_hit(rig, tmp_path):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    Cache(cache).store(key_for(static, 2.6), cubin.read_bytes(), "cubin", "sm_90")  # a neighbour of 2.5
    Cache(cache).store(key_for(static, 2.5, jit.Options(opt_level=2)), cubin.read_bytes(), "cubin", "sm_90")
    proc, stats = run_app(rig, cache, "rr", tmp_path)
    assert stats["hits"] == 0 and stats["substituted"] == 0
    assert [l.split()[1] for l in stub_lines(proc)] == ["cudaLaunchKernel"] * 2
    # With -O2 the second entry is the launch's.
    proc, stats = run_app(rig, cache, "rr", tmp_path, options=jit.Options(opt_level=2))
    assert stats["hits"] == 1


def test_a_kernel_without_runtime_constants_is_not_looked_up_unless_all(rig, tmp_path):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    # Every kernel: the key has no ARG record then.
    Cache(cache).store(jit_key(static, "sm_90", [], shared_bytes=16, config=jit.Options().config()),
                       cubin.read_bytes(), "cubin", "sm_90")
    plain = APP.replace("reg(h, &axpy_stub", "if (0) reg(h, &axpy_stub")
    (d / "plain.c").write_text(plain.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", "plain.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl",
                    *rpath(d), "-o", "plain"], check=True, cwd=d)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "KIR_HOOK_CLIENTS": str(JIT_CLIENT),
           "KIR_HOOK_ARCH": "sm_90", **client_environment(cache, stats=tmp_path / "s.json")}
    for extra, hits in (({}, 0), ({"KIR_JIT_ALL": "1"}, 2)):
        subprocess.run([d / "plain", fatbin, cubin, "rr"], check=True, env={**env, **extra}, capture_output=True)
        stats = json.loads((tmp_path / "s.json").read_text())
        assert stats["hits"] == hits, (extra, stats)


def test_kir_run(rig, tmp_path, kir_cli, hostile_library_path):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    Cache(cache).store(key_for(static, 2.5), cubin.read_bytes(), "cubin", "sm_90")
    result = kir_cli("run", "--jit-cache", cache, "--stats", tmp_path / "s.json", "--", d / "app", fatbin, cubin, "rr")
    assert result.returncode == 0, result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith(f"kir: jit: 2 launches looked up in {cache.resolve()}: "
                                                              "1 hit, 1 miss, 1 substituted, ")
    assert json.loads((tmp_path / "s.json").read_text())["hits"] == 1
    # Bad options: exit 2 before the app runs.
    for bad in (["--specialize", "warp"], ["--bounds", "x"], ["-O", "7"]):
        result = kir_cli("run", "--jit-cache", cache, *bad, "--", "true")
        assert result.returncode == 2 and "Traceback" not in result.stderr, (bad, result.stderr)


def test_a_bad_config_setting_disables_the_client_with_a_message(rig, tmp_path):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    proc = subprocess.run([d / "app", fatbin, cubin, "r"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK),
                               "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_JIT_CACHE": str(cache),
                               "KIR_JIT_CONFIG": "opt=zz"})
    assert proc.returncode == 0
    assert "kir-jit: error: KIR_JIT_CONFIG: opt=zz: not hexadecimal" in proc.stderr
    assert [l.split()[1] for l in stub_lines(proc)] == ["cudaLaunchKernel"]


@pytest.mark.parametrize("changes", ["value", "grid"])
def test_a_repeated_launch_reuses_its_key_only_while_every_input_is_unchanged(rig, tmp_path, changes):
    """The client keeps each kernel's last key with the values it was computed from
    (issue 15: a repeated launch compares bytes instead of hashing). Launches that
    alternate between a cached and an uncached key must hit exactly on the cached
    ones: for `value`, a alternates 2.5 / 3.5; for `grid`, with the key covering the
    grid (KIR_JIT_SPECIALIZE=grid), a stays 2.5 and the grid alternates 4 / 8."""
    d, fatbin, cubin, static = rig
    step = {"value": "a = (a == 2.5f ? 3.5f : 2.5f)", "grid": "g.x = (g.x == 4 ? 8 : 4)"}[changes]
    source = APP.replace("++c, a += 1.0f)", f"++c, {step})")
    assert source != APP
    (d / f"alternate_{changes}.c").write_text(source.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", f"alternate_{changes}.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1",
                    "-ldl", *rpath(d), "-o", f"alternate_{changes}"], check=True, cwd=d)
    cache = tmp_path / "cache"
    grid = {"grid": (4, 1, 1)}.get(changes)
    key = jit_key(static, "sm_90", [(1, F32, struct.pack("<f", 2.5))], grid=grid, shared_bytes=16,
                  config=jit.Options().config())
    Cache(cache).store(key, cubin.read_bytes(), "cubin", "sm_90")
    stats = tmp_path / "stats.json"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90",
           **client_environment(cache, stats=stats, specialize_grid=changes == "grid")}
    proc = subprocess.run([d / f"alternate_{changes}", fatbin, cubin, "rrrrrrr"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [l.split()[1] for l in stub_lines(proc)] == ["cuLaunchKernel", "cudaLaunchKernel"] * 3 + ["cuLaunchKernel"]
    result = json.loads(stats.read_text())
    assert (result["launches"], result["hits"], result["misses"], result["substituted"]) == (7, 4, 3, 4)


def test_the_miss_log_is_capped_and_the_counters_stay_exact(rig, tmp_path):
    """Issue 21 item 13: a runtime constant that changes at every launch (the app adds 1
    to `a` each time) made one miss line per launch and a remembered key per launch,
    forever. Now: 32 lines, then one summary line, then nothing; at most 4096 missed
    keys remembered; every launch still counted."""
    launches = 5000
    proc, stats = run_app(rig, tmp_path / "cache", "r" * launches, tmp_path)
    lines = proc.stderr.splitlines()
    assert len([l for l in lines if l.startswith("kir-jit: miss ")]) == 32
    summary = [l for l in lines if "further misses and errors are counted, not logged" in l]
    assert summary == ["kir-jit: 32 lines logged: further misses and errors are counted, not logged (the counters "
                       "at exit count every launch)"]
    assert len(lines) <= 34, lines[-5:]
    assert (stats["launches"], stats["misses"], stats["hits"]) == (launches, launches, 0)
    assert stats["not_logged"] == launches - 32 and 0 < stats["remembered"] <= 4096
    assert len(stub_lines(proc)) == launches  # every launch ran, the app's own


def test_the_key_covers_the_captures_of_the_lambdas_the_kernel_calls(rig, tmp_path):
    """Hook API 7: a Proteus `jit_variable` captured by a lambda the kernel calls enters the
    key as a CAPTURE record (kir_hook_kernel_captures). The app registers one (INT32 42, slot
    0, offset 0) for lambda type `axpy` — named in the kernel's demangled name, as a kernel
    templated on its lambda names it — by invisible reference, as JitInterface.h's
    RuntimeConstant is passed. The key without the capture must not hit; the key with it must."""
    d, fatbin, cubin, static = rig
    anchor = '  reg(h, &axpy_stub, (char*)"AXPY", infos, 1);\n'
    source = APP.replace(anchor, anchor + (
        '  _Alignas(16) unsigned char rc[80] = {0};\n'
        '  int captured = 42, type = 3 /* INT32 */, slot = 0, offset = 0;\n'
        '  memcpy(rc, &captured, 4); memcpy(rc + 16, &type, 4); memcpy(rc + 20, &slot, 4); memcpy(rc + 24, &offset, 4);\n'
        '  ((void (*)(const void*, const char*))dlsym(RTLD_DEFAULT, "__proteus_register_variable"))(rc, "axpy");\n'
        '  ((void (*)(const char*))dlsym(RTLD_DEFAULT, "__proteus_register_lambda"))("axpy");\n'))
    assert source != APP
    (d / "captures.c").write_text(source.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", "captures.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl",
                    *rpath(d), "-o", "captures"], check=True, cwd=d)
    capture = [("axpy", 0, 0, 3, struct.pack("<i", 42))]

    def key(a, captures=()):
        return jit_key(static, "sm_90", [(1, F32, struct.pack("<f", a))], shared_bytes=16,
                       config=jit.Options().config(), captures=captures)
    cache = tmp_path / "cache"
    Cache(cache).store(key(2.5), cubin.read_bytes(), "cubin", "sm_90")  # without the capture
    Cache(cache).store(key(3.5, capture), cubin.read_bytes(), "cubin", "sm_90")
    stats = tmp_path / "stats.json"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90", **client_environment(cache, stats=stats)}
    proc = subprocess.run([d / "captures", fatbin, cubin, "rr"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [l.split()[1] for l in stub_lines(proc)] == ["cudaLaunchKernel", "cuLaunchKernel"]
    result = json.loads(stats.read_text())
    assert (result["hits"], result["misses"]) == (1, 1)
    assert [m["key"] for m in result["missed"]] == [key(2.5, capture)]
