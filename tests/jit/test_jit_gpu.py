"""The JIT loop on the GPU: a Proteus-layout app (tests/fixtures/jit_app.cu: daxpy
with `a` registered as a runtime constant through the Proteus ABI, its IR
embedded as the pass embeds it) runs under the reference JIT client (`kir run`)
with a cache filled offline by `kir jit compile`: every launch of the specialized
value runs the cached object, the output is bitwise the plain run's, and an entry
compiled for another value never hits; an entry another user planted (uid 65534, issue 21
item 1) is refused and the app's own kernel runs."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

WARM_UP = 100  # jit_app's a=0 launches before the measured ones
LAUNCHES = 10


def device_arch() -> str:
    from cuda.bindings import driver
    driver.cuInit(0)
    _, device = driver.cuDeviceGet(0)
    attr = driver.CUdevice_attribute
    _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    return f"sm_{major}{minor}"


def run_under_client(kir_cli, app, cache, stats):
    # --no-compile: these tests fill the cache offline (`kir jit compile`); compiling on a
    # miss is test_kir_run_compiles_on_a_miss_from_an_empty_cache's
    result = kir_cli("run", "--jit-cache", cache, "--stats", stats, "--no-compile", "--", app, str(LAUNCHES))
    assert result.returncode == 0, result.stderr[-3000:]
    return result, json.loads(stats.read_text())


def test_the_cached_specialization_runs_and_changes_nothing(gpu, built, kir_cli, tmp_path):
    app, arch = built["jit_app"], device_arch()
    plain = subprocess.run([app, str(LAUNCHES)], capture_output=True, text=True, check=True)
    assert plain.stdout.startswith("checksum ")
    cache = tmp_path / "cache"
    first, stats = run_under_client(kir_cli, app, cache, tmp_path / "s1.json")
    assert first.stdout == plain.stdout
    assert stats["launches"] == WARM_UP + LAUNCHES + 1 and stats["hits"] == 0
    # The miss says how to fill it, as a command on the app's file.
    assert (f"kir jit compile {app.resolve()} --kernel _Z5daxpydPKdPdi --arch {arch} --arg 1:f64:2.5 --cache "
            in first.stderr), first.stderr[-2000:]
    compiled = kir_cli("jit", "compile", app, "--kernel", "daxpy", "--arch", arch, "--arg", "1:f64:2.5",
                       "--cache", cache, "--json")
    assert compiled.returncode == 0, compiled.stderr
    key = json.loads(compiled.stdout)["key"]
    assert key in [m["key"] for m in stats["missed"]]  # the client's key is the compiler's
    second, stats = run_under_client(kir_cli, app, cache, tmp_path / "s2.json")
    assert second.stdout == plain.stdout, "the specialized kernel changed the output"
    assert stats["hits"] == LAUNCHES and stats["substituted"] == LAUNCHES, stats
    assert stats["misses"] == WARM_UP + 1 and stats["substitute_failures"] == 0, stats


def test_an_entry_for_another_value_never_hits(gpu, built, kir_cli, tmp_path):
    app, arch = built["jit_app"], device_arch()
    cache = tmp_path / "cache"
    compiled = kir_cli("jit", "compile", app, "--kernel", "daxpy", "--arch", arch, "--arg", "1:f64:2.6",
                       "--cache", cache)
    assert compiled.returncode == 0, compiled.stderr
    result, stats = run_under_client(kir_cli, app, cache, tmp_path / "s.json")
    assert stats["hits"] == 0 and stats["substituted"] == 0, stats
    assert result.stdout == subprocess.run([app, str(LAUNCHES)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_kir_run_compiles_on_a_miss_from_an_empty_cache(gpu, built, kir_cli, tmp_path, mode):
    """Issue 23 §3: one `kir run` from an empty cache. sync: every launch runs code kir's
    compile service compiled for its value (a=0 for the warm-up, 2.5, 3), the first of
    each included; async: the original runs until the code is ready. The output is
    bitwise the plain run's either way."""
    app = built["jit_app"]
    plain = subprocess.run([app, str(LAUNCHES)], capture_output=True, text=True, check=True)
    cache = tmp_path / "cache"
    stats_path = tmp_path / "s.json"
    result = kir_cli("run", "--jit-cache", cache, "--stats", stats_path, "--mode", mode, "--", app, str(LAUNCHES))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == plain.stdout, "the compiled kernels changed the output"
    stats = json.loads(stats_path.read_text())
    assert stats["compile_failures"] == 0 and stats["service_errors"] == 0, stats
    assert stats["substitute_failures"] == 0, stats
    total = WARM_UP + LAUNCHES + 1
    if mode == "sync":
        assert stats["compiled"] == 3 and stats["substituted"] == total, stats
        assert stats["misses"] == 3 and stats["hits"] == total - 3, stats
        second = kir_cli("run", "--jit-cache", cache, "--stats", stats_path, "--", app, str(LAUNCHES))
        assert second.stdout == plain.stdout
        again = json.loads(stats_path.read_text())
        assert again["hits"] == total and again["compile_requests"] == 0, again
    else:
        assert stats["compile_requests"] >= 1 and stats["compile_wait_ms"] < 1000, stats


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's entry (chown) needs root")
@pytest.mark.parametrize("planted", ["entry", "directory"])
def test_an_entry_planted_by_another_user_is_refused(gpu, built, kir_cli, tmp_path, planted):
    """Issue 21 item 1, as shown on the H200: an entry (and, for `directory`, the cache
    directory and its shard: uid 65534 made the cache under /tmp) owned by uid 65534
    was substituted into root's app. Now it is refused with one line, counted as an
    error, and the app's own kernel runs (the output is the plain run's); given back
    to its owner, the very same entry hits."""
    app, arch = built["jit_app"], device_arch()
    plain = subprocess.run([app, str(LAUNCHES)], capture_output=True, text=True, check=True)
    cache = tmp_path / "cache"
    compiled = kir_cli("jit", "compile", app, "--kernel", "daxpy", "--arch", arch, "--arg", "1:f64:2.5",
                       "--cache", cache, "--json")
    assert compiled.returncode == 0, compiled.stderr
    key = json.loads(compiled.stdout)["key"]
    entry = cache / key[:2] / key
    planted_paths = [entry] if planted == "entry" else [cache, entry.parent, entry]
    for path in planted_paths:
        os.chown(path, NOBODY, NOBODY)
    result, stats = run_under_client(kir_cli, app, cache, tmp_path / "s1.json")
    assert result.stdout == plain.stdout
    assert stats["hits"] == 0 and stats["substituted"] == 0 and stats["errors"] >= 1, stats
    refused = [l for l in result.stderr.splitlines() if l.startswith("kir-jit: error: ")]
    assert len(refused) == 1 and f"refused: owned by uid {NOBODY}" in refused[0], result.stderr[-3000:]
    assert entry.exists()
    for path in planted_paths:
        os.chown(path, os.geteuid(), os.getegid())
    result, stats = run_under_client(kir_cli, app, cache, tmp_path / "s2.json")
    assert stats["hits"] == LAUNCHES and stats["substituted"] == LAUNCHES, stats
    assert result.stdout == plain.stdout
