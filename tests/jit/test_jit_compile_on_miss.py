"""Compiling on a miss (issue 23 §3): `kir run` starts kir's compile service
(kir.jit.service) and the reference JIT client (libkir_jit.so) sends it each missed
key's IR and values; the service compiles with kir.jit, stores the code under the
client's key, and the launch (sync) or a later one (async) runs it. Without a GPU:
the stub runtime and driver (tests/support/jit_rig.py), the app registering a fatbin
whose sm_90 cubin holds axpy's IR the Proteus way (build.py: jit_axpy.fatbin), so
the hook hands the client real IR that kir.jit really compiles (llvmlite, ptxas or
nvJitLink); the stub driver loads any cubin and says which launches ran it."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kir
import stub_cuda as override
from build import rpath  # tests/support/build.py
from jit_rig import APP, DRIVER, F32, JIT_CLIENT, key_for
from kir import jit
from kir.cache import Cache
from kir.hashing import jit_key, kernel_hashes
from kir.jit.client import client_environment, proteus_settings
from kir.jit.service import STATE

KIR = [sys.executable, "-m", "kir"]  # the CLI, as tests/support/running.py runs it

# The rig's app, with launch letters for these tests: `v` adds 1 to a (the rig's app adds 1
# at every launch: here a stays), `F` forks (the child's stdout goes to $CHILD_OUT; the
# parent waits for it at the end), `w` waits until the file $WAIT_FILE exists (at most 120 s).
COMPILE_APP = (APP.replace('#include "app_prelude.h"',
                           '#include "app_prelude.h"\n#include <stdlib.h>\n#include <sys/stat.h>\n'
                           '#include <sys/wait.h>\n#include <unistd.h>')
               .replace("  for (const char* c = argv[3]; *c; ++c, a += 1.0f) {",
                        "  pid_t child = -1;\n  for (const char* c = argv[3]; *c; ++c) {")
               .replace("      case 'P': {",
                        "      case 'v': a += 1.0f; r = 0; break;\n"
                        "      case 'F': fflush(stdout); child = fork();\n"
                        "        if (child == 0 && !freopen(getenv(\"CHILD_OUT\"), \"w\", stdout)) return 3;\n"
                        "        r = 0; break;\n"
                        "      case 'w': { struct stat st; for (int i = 0; i < 12000 && stat(getenv(\"WAIT_FILE\"), &st);"
                        " ++i) usleep(10000); r = 0; break; }\n"
                        "      case 'P': {")
               .replace("  return 0;\n}", "  if (child > 0) waitpid(child, 0, 0);\n  return 0;\n}"))


@pytest.fixture(scope="module")
def rig(built, tmp_path_factory):
    if "jit_axpy.fatbin" not in built:
        pytest.skip("clang-22 not installed: the Proteus-layout fixture cannot be built")
    d = tmp_path_factory.mktemp("compile_on_miss")
    override.build_stub_libraries(d, DRIVER)
    assert COMPILE_APP.count("case 'F'") == 1 and "a += 1.0f) {" not in COMPILE_APP
    (d / "app.c").write_text(COMPILE_APP.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", "app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d),
                    "-o", "app"], check=True, cwd=d)
    out = {"dir": d, "cubin": built["kernels_sm90.cubin"]}
    for name in ("jit_axpy.fatbin", "jit_axpy_bad.fatbin", "jit_axpy_global.fatbin"):
        hashes, _ = kernel_hashes(kir.open(built[name]))
        # the static hash of the kernel with IR: the IR's (docs/hashing.md), as the hook computes it
        out[name] = (built[name], next(h.static.hex for h in hashes
                                       if h.kernel == override.AXPY and h.target == "sm_90"
                                       and h.code_kind == "ir" and "cubin image" in h.source))
    return out


def entry_path(cache: Path, key: str) -> Path:
    return cache / key[:2] / key


def kir_run(kir_cli, rig, cache, launches, tmp_path, *options, fatbin="jit_axpy.fatbin", env=None):
    d = rig["dir"]
    stats = tmp_path / "stats.json"
    extra = {"KIR_HOOK_ARCH": "sm_90", "LD_LIBRARY_PATH": str(d), **(env or {})}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in extra.items():
            mp.setenv(k, v)
        result = kir_cli("run", *(["--jit-cache", cache] if cache else []), "--stats", stats, *options, "--",
                         d / "app", rig[fatbin][0], rig["cubin"], launches)
    assert result.returncode == 0, result.stdout + result.stderr
    return result, json.loads(stats.read_text())


def launch_kinds(stdout: str) -> list[str]:
    """`cuLaunchKernel` for a substitute (the layer launches the cached code through the
    driver), `cudaLaunchKernel` for the app's own kernel."""
    return [l.split()[1] for l in stdout.splitlines() if l.startswith("stub ")]


def service_processes(socket_path: str) -> list[int]:
    """Processes whose command line names the service's socket."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if socket_path.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_sync_from_an_empty_cache_the_first_launch_already_runs_compiled_code(rig, kir_cli, tmp_path):
    cache = tmp_path / "cache"
    result, stats = kir_run(kir_cli, rig, cache, "rrr", tmp_path)
    # Every launch ran the compiled code, the first included: it waited for it.
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 3, result.stdout + result.stderr
    assert (stats["misses"], stats["hits"], stats["compiled"], stats["substituted"]) == (1, 2, 1, 3), stats
    assert stats["mode"] == "sync" and stats["compile_failures"] == 0 and stats["service_errors"] == 0
    # Stored under the client's key (the one kir.hashing gives), compiled by kir.jit for sm_90.
    key = key_for(rig["jit_axpy.fatbin"][1], 2.5)
    entry = Cache(cache).lookup(key)
    assert entry is not None and entry.arch == "sm_90" and entry.meta["producer"] == "kir.jit"
    assert entry.meta["specialize.args"].startswith("1:f32:2.5"), entry.meta
    assert "1 compiled (sync, " in result.stderr.splitlines()[-1]
    # The service is gone with the app, its private directory too.
    assert stats["service"] and not Path(stats["service"]).parent.exists()
    assert service_processes(stats["service"]) == []
    # The cache's own checks see the JIT's state directory as part of it.
    verify = kir_cli("cache", "verify", cache)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # A second run finds it in the cache: nothing compiled.
    result, stats = kir_run(kir_cli, rig, cache, "rr", tmp_path)
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 2 and stats["compile_requests"] == 0


def test_async_the_original_runs_until_the_code_is_ready(rig, kir_cli, tmp_path):
    cache = tmp_path / "cache"
    key = key_for(rig["jit_axpy.fatbin"][1], 2.5)
    # r: the miss (queued, the original runs); w: until the service stored the entry; r r: the
    # recheck (every launch: KIR_JIT_RECHECK_MS=0) finds it.
    result, stats = kir_run(kir_cli, rig, cache, "rwrr", tmp_path, "--mode", "async",
                            env={"KIR_JIT_RECHECK_MS": "0", "WAIT_FILE": str(entry_path(cache, key))})
    assert launch_kinds(result.stdout) == ["cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernel"], result.stderr
    assert stats["mode"] == "async" and stats["compile_requests"] == 1 and stats["substituted"] == 2, stats
    assert stats["compile_wait_ms"] < 5000, "async: the launch only waited for the queue's answer"


def test_one_compile_for_two_processes_sharing_a_cache(rig, kir_cli, tmp_path):
    cache = tmp_path / "cache"
    d = rig["dir"]
    env = {**os.environ, "KIR_HOOK_ARCH": "sm_90", "LD_LIBRARY_PATH": str(d)}
    runs = [subprocess.Popen([*KIR, "run", "--jit-cache", str(cache), "--stats", str(tmp_path / f"s{i}"),
                              "--", str(d / "app"), str(rig["jit_axpy.fatbin"][0]), str(rig["cubin"]), "rr"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [r.communicate(timeout=300) for r in runs]
    assert all(r.returncode == 0 for r in runs), outputs
    for out, _ in outputs:
        assert launch_kinds(out) == ["cuLaunchKernel"] * 2
    said = "".join(err for _, err in outputs)
    # One service compiled the key; the other found it in the cache once it held the key's lock.
    assert said.count(": compiled in ") == 1, said
    assert said.count(": in the cache") + sum(json.loads((tmp_path / f"s{i}").read_text())["compile_requests"] == 0
                                              for i in range(2)) == 1, said
    assert [e.key for e in Cache(cache).entries()] == [key_for(rig["jit_axpy.fatbin"][1], 2.5)]
    assert not any((cache / STATE / "locks").iterdir()), "a lock file left behind"


def test_a_full_queue_means_the_original_runs(rig, kir_cli, tmp_path):
    """--queue 1, async: a=2.5 is queued; a=3.5, asked while it compiles, finds the queue
    full and runs the original, counted (and asked again at its next recheck)."""
    result, stats = kir_run(kir_cli, rig, tmp_path / "cache", "rvr", tmp_path, "--mode", "async", "--queue", "1")
    assert launch_kinds(result.stdout) == ["cudaLaunchKernel"] * 2
    assert (stats["compile_requests"], stats["queue_full"]) == (2, 1), stats
    assert "1 queue full" in result.stderr.splitlines()[-1]


def test_a_compile_failure_is_remembered_as_a_negative_entry(rig, kir_cli, tmp_path):
    cache = tmp_path / "cache"
    static = rig["jit_axpy_bad.fatbin"][1]
    key = key_for(static, 2.5)
    result, stats = kir_run(kir_cli, rig, cache, "rrr", tmp_path, fatbin="jit_axpy_bad.fatbin")
    assert launch_kinds(result.stdout) == ["cudaLaunchKernel"] * 3  # the app's own code, every time
    # Asked once: the client does not ask again for a key that failed.
    assert (stats["compile_requests"], stats["compile_failures"], stats["compiled"]) == (1, 1, 0), stats
    negative = cache / STATE / "failed" / key
    record = json.loads(negative.read_text())
    assert record["kir"] == kir.__version__ and record["kernel"] == override.AXPY
    assert "kir.not.an.instruction" in record["message"] or "ptxas" in record["message"].lower(), record
    assert oct(negative.stat().st_mode & 0o777) == "0o600"
    assert oct((cache / STATE).stat().st_mode & 0o777) == "0o700"
    assert f"{override.AXPY} key={key}: compile failed: " in result.stderr
    assert Cache(cache).lookup(key) is None
    # Another process: answered from the negative entry, nothing compiled again.
    result, stats = kir_run(kir_cli, rig, cache, "r", tmp_path, fatbin="jit_axpy_bad.fatbin")
    assert stats["compile_failures"] == 1 and "(remembered: " in result.stderr, result.stderr
    # A negative entry others could have written is not trusted: compiled (and failing) again.
    negative.chmod(0o666)
    record["message"] = "planted"
    negative.write_text(json.dumps(record))
    result, stats = kir_run(kir_cli, rig, cache, "r", tmp_path, fatbin="jit_axpy_bad.fatbin")
    assert "(remembered: " not in result.stderr and "planted" not in result.stderr, result.stderr
    assert json.loads(negative.read_text())["message"] != "planted"
    assert oct(negative.stat().st_mode & 0o777) == "0o600"


def test_code_with_its_own_device_globals_is_not_substituted(rig, kir_cli, tmp_path):
    """axpy reading a __device__ variable: the code kir.jit compiles would hold its own
    copy of it (kir.jit does not relink globals as Proteus does), so the app would run
    with that copy's value, not the program's. The service stores nothing, remembers why
    (a negative entry), and the app's own kernel runs every time."""
    cache = tmp_path / "cache"
    static = rig["jit_axpy_global.fatbin"][1]
    key = key_for(static, 2.5)
    result, stats = kir_run(kir_cli, rig, cache, "rr", tmp_path, fatbin="jit_axpy_global.fatbin")
    assert launch_kinds(result.stdout) == ["cudaLaunchKernel"] * 2
    assert (stats["compile_requests"], stats["compile_failures"], stats["compiled"]) == (1, 1, 0), stats
    assert Cache(cache).lookup(key) is None
    message = json.loads((cache / STATE / "failed" / key).read_text())["message"]
    assert "holds its own copies of the device globals kir_bias" in message, message
    assert "kir_bias" in result.stderr


def test_a_forked_child_compiles_through_its_own_connection(rig, kir_cli, tmp_path):
    """The parent's first launch is compiled (sync) before it forks; then parent and child
    each launch a=2.5 (a hit) and a=3.5 (a miss both ask the service for, each on a
    connection of its own, at the same time): every launch of both runs compiled code."""
    cache = tmp_path / "cache"
    child_out = tmp_path / "child.txt"
    result, stats = kir_run(kir_cli, rig, cache, "rFrvr", tmp_path, env={"CHILD_OUT": str(child_out)})
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 3, result.stdout + result.stderr
    assert launch_kinds(child_out.read_text()) == ["cuLaunchKernel"] * 2, child_out.read_text() + result.stderr
    assert "(pid " in result.stderr and "forked)" in result.stderr  # the child's own summary line
    static = rig["jit_axpy.fatbin"][1]
    assert sorted(e.key for e in Cache(cache).entries()) == sorted(key_for(static, a) for a in (2.5, 3.5))
    assert stats["service_errors"] == 0 and not service_processes(stats["service"])


def test_the_service_ends_when_kir_run_is_killed(rig, kir_cli, tmp_path):
    d = rig["dir"]
    env = {**os.environ, "KIR_HOOK_ARCH": "sm_90", "LD_LIBRARY_PATH": str(d),
           "WAIT_FILE": str(tmp_path / "never")}
    run = subprocess.Popen([*KIR, "run", "--jit-cache", str(tmp_path / "cache"), "--", str(d / "app"),
                            str(rig["jit_axpy.fatbin"][0]), str(rig["cubin"]), "rw"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        services = []
        while not services and time.monotonic() < deadline:
            time.sleep(0.2)
            services = [p for p in service_processes("kir.jit.service import main")
                        if Path(f"/proc/{p}/status").read_text().count(f"PPid:\t{run.pid}\n")]
        assert services, "the service did not start"
        os.kill(run.pid, signal.SIGKILL)  # kir run dies without stopping it
        run.wait()
        deadline = time.monotonic() + 20
        while any(Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text()
                  for p in services) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [p for p in services if Path(f"/proc/{p}").exists()
                 and "zombie" not in Path(f"/proc/{p}/status").read_text()]
        assert alive == [], "the service outlived kir run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # the app, still waiting (its own process group)


def test_a_key_mismatch_is_an_error_and_nothing_is_stored(rig, tmp_path, capfd):
    """The service compiles -O2 code, the client keys -O3 code: the compiled code's key
    is not the client's, so nothing is stored, the client hears it once, and the
    original runs."""
    from kir.jit.service import start
    cache = tmp_path / "cache"
    service = start(cache, jit.Options(opt_level=2))
    d = rig["dir"]
    try:
        stats = tmp_path / "stats.json"
        env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
               "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90",
               **client_environment(cache, stats=stats, service=service.socket)}
        proc = subprocess.run([d / "app", rig["jit_axpy.fatbin"][0], rig["cubin"], "rr"], capture_output=True,
                              text=True, env=env, timeout=300)
    finally:
        service.stop()
    assert proc.returncode == 0, proc.stderr
    assert launch_kinds(proc.stdout) == ["cudaLaunchKernel"] * 2
    assert "compile failed: the compiled code's JIT key is " in proc.stderr, proc.stderr
    said = capfd.readouterr().err  # the service's stderr is this process's
    assert f"kir-jit-service: error: key mismatch {override.AXPY} key={key_for(rig['jit_axpy.fatbin'][1], 2.5)} " in said
    assert Cache(cache).entries() == [] and not any((cache / STATE / "failed").iterdir())
    result = json.loads(stats.read_text())
    assert (result["compile_requests"], result["compile_failures"]) == (1, 1)


def test_a_dead_service_means_the_original_runs(rig, tmp_path):
    cache = tmp_path / "cache"
    d = rig["dir"]
    stats = tmp_path / "stats.json"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90",
           **client_environment(cache, stats=stats, service=str(tmp_path / "no-such.sock"), recheck_ms=0)}
    proc = subprocess.run([d / "app", rig["jit_axpy.fatbin"][0], rig["cubin"], "rrr"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0 and launch_kinds(proc.stdout) == ["cudaLaunchKernel"] * 3
    result = json.loads(stats.read_text())
    assert (result["compile_requests"], result["service_errors"]) == (1, 1), result  # not asked again
    assert proc.stderr.count("kir-jit: error: compile service ") == 1


# ---- Proteus's settings -------------------------------------------------------------


def test_proteus_settings_are_read_as_proteus_reads_them():
    s = proteus_settings({"PROTEUS_ASYNC_COMPILATION": "1", "PROTEUS_ASYNC_THREADS": "3",
                          "PROTEUS_SPECIALIZE_DIMS": "0", "PROTEUS_SPECIALIZE_LAUNCH_BOUNDS": "1",
                          "PROTEUS_OPT_LEVEL": "2", "PROTEUS_CODEGEN_OPT_LEVEL": "1", "PROTEUS_KERNEL_CLONE": "x",
                          "PATH": "/bin"})
    assert (s.mode, s.workers, s.specialize_dims, s.launch_bounds, s.opt_level, s.codegen_opt) == \
        ("async", 3, False, True, 2, 1)
    assert s.ignored == ["PROTEUS_KERNEL_CLONE (no kir meaning)"]
    assert proteus_settings({"PROTEUS_OPT_LEVEL": "s"}).ignored == ["PROTEUS_OPT_LEVEL=s (kir.jit has no -Os: -O3)"]
    assert proteus_settings({}).line() is None
    from kir.errors import OptionError
    for bad in ({"PROTEUS_ASYNC_THREADS": "0"}, {"PROTEUS_DISABLE": "yes"}, {"PROTEUS_CODEGEN_OPT_LEVEL": "7"}):
        with pytest.raises(OptionError, match=next(iter(bad))):
            proteus_settings(bad)


def test_kir_run_honours_proteus_settings_and_says_which(rig, kir_cli, tmp_path):
    cache = tmp_path / "proteus-cache"
    key = key_for(rig["jit_axpy.fatbin"][1], 2.5)
    # PROTEUS_CACHE_DIR names the cache; PROTEUS_ASYNC_COMPILATION=1 makes it async.
    result, stats = kir_run(kir_cli, rig, None, "rwr", tmp_path,
                            env={"PROTEUS_CACHE_DIR": str(cache), "PROTEUS_ASYNC_COMPILATION": "1",
                                 "PROTEUS_TRACE_OUTPUT": "1", "KIR_JIT_RECHECK_MS": "0",
                                 "WAIT_FILE": str(entry_path(cache, key))})
    line = next(l for l in result.stderr.splitlines() if l.startswith("kir: jit: Proteus settings: "))
    assert "honoured PROTEUS_ASYNC_COMPILATION=1, PROTEUS_CACHE_DIR=" in line
    assert "PROTEUS_TRACE_OUTPUT (no kir meaning)" in line.split("ignored ", 1)[1]
    assert stats["mode"] == "async" and launch_kinds(result.stdout) == ["cudaLaunchKernel", "cuLaunchKernel"]
    assert Cache(cache).lookup(key) is not None
    # kir's option wins, and the line says so.
    result, stats = kir_run(kir_cli, rig, tmp_path / "c2", "r", tmp_path, "--mode", "sync",
                            env={"PROTEUS_ASYNC_COMPILATION": "1"})
    assert "PROTEUS_ASYNC_COMPILATION=1 (overridden by --mode)" in result.stderr and stats["mode"] == "sync"
    # PROTEUS_DISABLE: nothing looked up, nothing compiled.
    d = rig["dir"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROTEUS_DISABLE", "1")
        mp.setenv("LD_LIBRARY_PATH", str(d))
        mp.setenv("KIR_HOOK_ARCH", "sm_90")
        disabled = kir_cli("run", "--jit-cache", tmp_path / "c3", "--", d / "app", rig["jit_axpy.fatbin"][0],
                           rig["cubin"], "rr")
    assert disabled.returncode == 0 and launch_kinds(disabled.stdout) == ["cudaLaunchKernel"] * 2
    assert "kir: jit: disabled (PROTEUS_DISABLE / KIR_JIT_DISABLE)" in disabled.stderr
    # No cache named anywhere: exit 2 before the app runs.
    nothing = kir_cli("run", "--", "true")
    assert nothing.returncode == 2 and "no cache: --jit-cache DIR" in nothing.stderr, nothing.stderr
    assert not (tmp_path / "c3").exists() or not any((tmp_path / "c3").iterdir())
    # PROTEUS_USE_STORED_CACHE=0: a cache for this run only.
    result, stats = kir_run(kir_cli, rig, None, "rr", tmp_path, env={"PROTEUS_USE_STORED_CACHE": "0"})
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 2 and not Path(stats["cache"]).exists()
    # PROTEUS_SPECIALIZE_DIMS=1 and PROTEUS_SPECIALIZE_LAUNCH_BOUNDS=1: the key covers grid, block and
    # bounds = the block's size (the app launches 4 x 32), as kir.hashing computes it.
    cache = tmp_path / "dims"
    result, stats = kir_run(kir_cli, rig, cache, "r", tmp_path,
                            env={"PROTEUS_SPECIALIZE_DIMS": "1", "PROTEUS_SPECIALIZE_LAUNCH_BOUNDS": "1"})
    expected = jit_key(rig["jit_axpy.fatbin"][1], "sm_90", [(1, F32, struct.pack("<f", 2.5))], grid=(4, 1, 1),
                       block=(32, 1, 1), bounds=(32, 0), shared_bytes=16, config=jit.Options().config())
    assert [e.key for e in Cache(cache).entries()] == [expected] and stats["substituted"] == 1
    assert Cache(cache).lookup(expected).meta["specialize.bounds"] == "32,0"
    # PROTEUS_SPECIALIZE_ARGS=0, PROTEUS_OPT_LEVEL=2, PROTEUS_CODEGEN_OPT_LEVEL=1: one entry for every
    # value of a (the key has no ARG record), compiled at -O2 / codegen -O1 (the key's CONFIG records).
    cache = tmp_path / "no-args"
    result, stats = kir_run(kir_cli, rig, cache, "rvrvr", tmp_path,
                            env={"PROTEUS_SPECIALIZE_ARGS": "0", "PROTEUS_OPT_LEVEL": "2",
                                 "PROTEUS_CODEGEN_OPT_LEVEL": "1"})
    expected = jit_key(rig["jit_axpy.fatbin"][1], "sm_90", [], shared_bytes=16,
                       config=jit.Options(opt_level=2, codegen_opt=1).config())
    assert [e.key for e in Cache(cache).entries()] == [expected], result.stderr
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 3 and stats["compiled"] == 1


# ---- defects of the client (issue 23 §1) ---------------------------------------------


def test_the_miss_line_names_the_binary_not_BINARY(rig, kir_cli, tmp_path):
    result, stats = kir_run(kir_cli, rig, tmp_path / "cache", "r", tmp_path, "--no-compile")
    miss = next(l for l in result.stderr.splitlines() if l.startswith("kir-jit: miss "))
    assert " BINARY " not in miss
    assert f": kir jit compile {(rig['dir'] / 'app').resolve()} --kernel {override.AXPY} --arch sm_90 " in miss
    assert "--shared-bytes 16 " in miss and stats["compile_requests"] == 0 and stats["service"] is None


def test_added_ns_per_launch_leaves_out_each_threads_first_launch(rig, tmp_path):
    """The first launch of a thread reads the device's arch (here: 50 ms, a slow driver
    call) and the cache for the first time; it is not a sample of the per-launch cost
    (before: the only sample of a short run, 4.8-8.4 µs at 4,004 launches on the H200)."""
    d = tmp_path / "slow"
    d.mkdir()
    slow = DRIVER.replace("int cuDeviceGetAttribute(int* v, int a, int d) { (void)d;",
                          "int cuDeviceGetAttribute(int* v, int a, int d) { (void)d; usleep(50000);")
    assert slow != DRIVER
    override.build_stub_libraries(d, "#include <unistd.h>\n" + slow)
    (d / "app.c").write_text(COMPILE_APP.replace("AXPY", override.AXPY))
    subprocess.run(["gcc", "-Wall", "app.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl", *rpath(d),
                    "-o", "app"], check=True, cwd=d)
    cache = tmp_path / "cache"
    Cache(cache).store(key_for(rig["jit_axpy.fatbin"][1], 2.5), rig["cubin"].read_bytes(), "cubin", "sm_90")
    stats = tmp_path / "stats.json"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(override.HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": str(JIT_CLIENT), "KIR_HOOK_ARCH": "sm_90", **client_environment(cache, stats=stats)}
    proc = subprocess.run([d / "app", rig["jit_axpy.fatbin"][0], rig["cubin"], "rrrr"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(stats.read_text())
    assert result["hits"] == 4 and result["timed_launches"] == 1, result
    assert 0 < result["added_ns_per_launch"] < 5e6, result  # with the first launch: > 5e7


# --- arrays, static arrays and lambda captures (issue 23: the keys of kir.jit and the client agree) ---

X = (1.5, -2.0, 0.25, 8.0)  # the ARRAY app's x[0..3]: what the key reads through the pointer
COEFFS = (0.5, 2.0, -1.0, 3.0)  # the STATIC_ARRAY app's Coeffs, the kernel's first argument by value
SCALE4 = "_Z6scale46CoeffsPfi"  # tests/fixtures/jit_arrays.cu
PROTEUS_REG = '  void* infos[1] = {scalar(5, 0)};\n  reg(h, &axpy_stub, (char*)"AXPY", infos, 1);\n'
assert PROTEUS_REG in COMPILE_APP

# x (Proteus Pos 1) an ARRAY of 4 FLOAT (11, 5) read through its pointer; `a` as before.
ARRAY_APP = (COMPILE_APP
             .replace("const float* x = 0;", "static const float xs[4] = {%s}; const float* x = xs;"
                      % ", ".join(f"{v}f" for v in X))
             .replace(PROTEUS_REG,
                      '  void* (*array)(int, int, int, int) = (void* (*)(int, int, int, int))dlsym(RTLD_DEFAULT,\n'
                      '      "__proteus_create_runtime_constant_info_array_const_size");\n'
                      '  void* infos[2] = {scalar(5, 0), array(11, 1, 4, 5)};\n'
                      '  reg(h, &axpy_stub, (char*)"AXPY", infos, 2);\n'))

# scale4(Coeffs c, float* y, int n): c (Pos 0) a STATIC_ARRAY of 4 FLOAT (9, 5), by value.
STATIC_APP = (COMPILE_APP
              .replace("void* args[] = {&a, &x, &y, &n};",
                       "struct { float c[4]; } coeffs = {{%s}}; (void)a; (void)x;\n"
                       "  void* args[] = {&coeffs, &y, &n};" % ", ".join(f"{v}f" for v in COEFFS))
              .replace(PROTEUS_REG,
                       '  void* (*array)(int, int, int, int) = (void* (*)(int, int, int, int))dlsym(RTLD_DEFAULT,\n'
                       '      "__proteus_create_runtime_constant_info_array_const_size");\n'
                       '  void* infos[1] = {array(9, 0, 4, 5)};\n'
                       '  reg(h, &axpy_stub, (char*)"AXPY", infos, 1);\n'))

# A lambda capture (INT32 7, slot 0, offset 0) published as Proteus's jit_variable and
# register_lambda do (include/proteus/JitInterface.h). The hook takes a lambda to be a kernel's
# when the kernel's IR defines its operator() or its demangled name names the lambda's type (a
# kernel templated on it): here the lambda is named `axpy`, which axpy's demangled name names.
CAPTURE_APP = COMPILE_APP.replace(PROTEUS_REG, PROTEUS_REG + (
    '  struct { union { unsigned char b[16]; long double align; } v; int type, pos, offset; char rest[64]; } rc;\n'
    '  memset(&rc, 0, sizeof rc); int seven = 7; memcpy(rc.v.b, &seven, 4); rc.type = 3;\n'
    '  ((void (*)(void*, const char*))dlsym(RTLD_DEFAULT, "__proteus_register_variable"))(&rc, "axpy");\n'
    '  ((void (*)(const char*))dlsym(RTLD_DEFAULT, "__proteus_register_lambda"))("axpy");\n'))


@pytest.fixture(scope="module")
def apps(rig, built):
    if "jit_arrays.fatbin" not in built:
        pytest.skip("clang-22 not installed: the Proteus-layout fixture cannot be built")
    d = rig["dir"]
    out = {}
    for name, text, kernel in (("array", ARRAY_APP, override.AXPY), ("static", STATIC_APP, SCALE4),
                               ("capture", CAPTURE_APP, override.AXPY)):
        assert text.count("__proteus") >= 2, name
        text = text.replace('#include "app_prelude.h"', '#include "app_prelude.h"\n#include <string.h>')
        (d / f"{name}.c").write_text(text.replace("AXPY", kernel))
        subprocess.run(["gcc", "-Wall", f"{name}.c", f"-L{d}", "-l:libcudart.so", "-l:libcuda.so.1", "-ldl",
                        *rpath(d), "-o", name], check=True, cwd=d)
        out[name] = d / name
    hashes, _ = kernel_hashes(kir.open(built["jit_arrays.fatbin"]))
    out["jit_arrays.fatbin"] = (built["jit_arrays.fatbin"], next(
        h.static.hex for h in hashes if h.kernel == SCALE4 and h.target == "sm_90" and h.code_kind == "ir"
        and "cubin image" in h.source))
    return out


def run_app_from_empty(kir_cli, rig, app, fatbin, cache, tmp_path, env=None):
    d = rig["dir"]
    stats = tmp_path / "stats.json"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"KIR_HOOK_ARCH": "sm_90", "LD_LIBRARY_PATH": str(d), **(env or {})}.items():
            mp.setenv(k, v)
        result = kir_cli("run", "--jit-cache", cache, "--stats", stats, "--", app, fatbin, rig["cubin"], "rr")
    assert result.returncode == 0, result.stdout + result.stderr
    return result, json.loads(stats.read_text())


def assert_compiled_and_substituted(result, stats, cache, key):
    assert "mismatch" not in result.stderr, result.stderr
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 2, result.stdout + result.stderr
    assert (stats["misses"], stats["hits"], stats["compiled"], stats["compile_failures"]) == (1, 1, 1, 0), stats
    entry = Cache(cache).lookup(key)  # stored under the client's key: kir.jit's key is the same
    assert entry is not None and entry.meta["producer"] == "kir.jit", result.stderr
    return entry


def test_an_array_behind_a_pointer_is_compiled_on_a_miss(rig, apps, kir_cli, tmp_path):
    """Regression (issue 23): an ARRAY runtime constant entered the client's key as ARG(2, f32,
    its elements) but kir.jit's as ARG(2, bytes, ...): a mismatch, nothing stored, never compiled.
    And x's elements are read from the device once per launch (the miss's request sends the
    values kir_jit_key returned, kir.h ABI 10), not once for the key and again for the request."""
    cache = tmp_path / "cache"
    fatbin, static = rig["jit_axpy.fatbin"]
    reads = tmp_path / "reads"
    result, stats = run_app_from_empty(kir_cli, rig, apps["array"], fatbin, cache, tmp_path,
                                       env={"KIR_STUB_READS": str(reads)})
    assert reads.read_text().split() == ["16", "16"]  # the miss's launch, then the hit's
    elements = struct.pack("<4f", *X)
    key = jit_key(static, "sm_90", [(1, F32, struct.pack("<f", 2.5)), (2, F32, elements)], shared_bytes=16,
                  config=jit.Options().config())
    entry = assert_compiled_and_substituted(result, stats, cache, key)
    # specialized: x's elements are a constant of the code
    assert entry.meta["specialize.args"] == f"1:f32:2.5 2:bytes:{elements.hex()}", entry.meta


def test_a_static_array_by_value_is_compiled_on_a_miss(rig, apps, kir_cli, tmp_path):
    """Regression (issue 23): a STATIC_ARRAY (by value) keyed as its element type by the client,
    as bytes by kir.jit: a mismatch."""
    cache = tmp_path / "cache"
    fatbin, static = apps["jit_arrays.fatbin"]
    result, stats = run_app_from_empty(kir_cli, rig, apps["static"], fatbin, cache, tmp_path)
    elements = struct.pack("<4f", *COEFFS)
    key = jit_key(static, "sm_90", [(1, F32, elements)], shared_bytes=16, config=jit.Options().config())
    entry = assert_compiled_and_substituted(result, stats, cache, key)
    assert entry.meta["specialize.args"] == f"1:bytes:{elements.hex()}", entry.meta


def test_a_kernel_with_lambda_captures_is_compiled_on_a_miss(rig, apps, kir_cli, tmp_path):
    """Regression (issue 23): the client's key covers the kernel's lambda captures (CAPTURE
    records), the request did not carry them: kir.jit's key lacked them, a mismatch."""
    cache = tmp_path / "cache"
    fatbin, static = rig["jit_axpy.fatbin"]
    result, stats = run_app_from_empty(kir_cli, rig, apps["capture"], fatbin, cache, tmp_path)
    from kir.model import ArgType
    capture = ("axpy", 0, 0, int(ArgType.i32), struct.pack("<i", 7))
    key = jit_key(static, "sm_90", [(1, F32, struct.pack("<f", 2.5))], shared_bytes=16,
                  config=jit.Options().config(), captures=[capture])
    assert key != key_for(static, 2.5)  # the capture is part of the key
    entry = assert_compiled_and_substituted(result, stats, cache, key)
    assert entry.meta["specialize.captures"] == f"axpy|0|0|{int(ArgType.i32)}|{struct.pack('<i', 7).hex()}"


def test_kir_run_fp_contract_off_from_an_empty_cache(rig, kir_cli, tmp_path):
    """`kir run --fp-contract off`: the client's CONFIG records (KIR_JIT_CONFIG) are the
    service's options' (fp-contract off), so the compiled code is stored under the client's key."""
    cache = tmp_path / "cache"
    result, stats = kir_run(kir_cli, rig, cache, "rrr", tmp_path, "--fp-contract", "off")
    assert launch_kinds(result.stdout) == ["cuLaunchKernel"] * 3, result.stdout + result.stderr
    assert (stats["misses"], stats["hits"], stats["compiled"]) == (1, 2, 1), stats
    key = key_for(rig["jit_axpy.fatbin"][1], 2.5, jit.Options(fp_contract="off"))
    assert key != key_for(rig["jit_axpy.fatbin"][1], 2.5)
    entry = Cache(cache).lookup(key)
    assert entry is not None and entry.meta["config.fp-contract"] == "off" and entry.meta["fp_contract"] == "off"
