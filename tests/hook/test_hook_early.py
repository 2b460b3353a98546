"""The hook layer entered before its own constructors ran, with the tracing
client and another client (issue 21, item 17).

A library the app links is initialized before the preloaded hook: when its
constructor already calls the runtime — the registration of its kernels, as a
CUDA library built by nvcc or the Proteus pass does — the layer starts there,
and loading a client from KIR_HOOK_CLIENTS (dlopen) runs the hook's pending
constructors, the tracing client's among them, which enters the layer again.
That second entry came while the layer's function-local static was still being
initialized: `terminate called after throwing an instance of
'__gnu_cxx::recursive_init_error'` (exit 134) on the H200, under the three
commands below, with a Proteus-layout binary.

Without a GPU: the stub runtime and driver of tests/support/stub_cuda.py (the
driver with a device, tests/support/jit_rig.py's), a C library in the Proteus
layout — its module constructor registers the real fatbin of
tests/fixtures/kernels.cu with the runtime and through the Proteus ABI (with a
runtime constant), and it launches through __proteus_launch_kernel, served by
the hook — and an app that calls it. The nvcc-built twin (tests/fixtures/
proteus_lib.cu, its kernel registered by nvcc's code in the library's
constructor) exits as the app does here, and on the GPU its output must not
change under kir."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import kir
import stub_cuda as override
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)
from jit_rig import DRIVER

LIB = Path(kir.__file__).parent / "lib"

LIBRARY = source("hook/hook_early_library.c")

APP = source("hook/hook_early_app.c")


@pytest.fixture(scope="module")
def app(built, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("early")
    override.build_stub_libraries(d, DRIVER)
    (d / "lib.c").write_text(LIBRARY.replace("AXPY", override.AXPY).replace("FATBIN", str(built["kernels.fatbin"])))
    (d / "app.c").write_text(APP)

    def cc(*args):
        subprocess.run(["gcc", "-Wall", *map(str, args)], check=True, cwd=d)

    cc("-shared", "-fPIC", "lib.c", f"-L{d}", "-l:libcudart.so", *rpath(d), "-o", "libproteus_lib.so")
    # The app loads the stub driver itself (it calls none of it: --no-as-needed), as a
    # runtime would; else the hook's clients would load whichever libcuda.so.1 comes first.
    cc("app.c", "-Wl,--no-as-needed", f"-L{d}", "-l:libproteus_lib.so", "-l:libcudart.so", "-l:libcuda.so.1",
       *rpath(d), "-o", "app")
    return d / "app"


def launches(text: str) -> list[dict]:
    return [e for e in map(json.loads, (l for l in text.splitlines() if l.startswith('{"event"')))
            if e["event"] == "launch"]


def assert_ran(result) -> None:
    assert "recursive_init_error" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "app launched: 0" in result.stdout
    assert "stub cudaLaunchKernel" in result.stdout  # the Proteus launch reached the runtime


def test_kir_run_with_the_tracer(app, tmp_path, kir_cli, monkeypatch, hostile_library_path):
    """KIR_TRACE=json kir run --jit-cache C: the JIT client and the tracer."""
    monkeypatch.setenv("KIR_TRACE", "json")
    result = kir_cli("run", "--jit-cache", tmp_path / "cache", "--", app)
    assert_ran(result)
    [launch] = launches(result.stderr)
    assert (launch["api"], launch["kernel"]) == ("__proteus_launch_kernel", override.AXPY)
    assert "kir: jit: 1 launch looked up" in result.stderr  # the client saw it too (a miss)


def test_kir_record_with_the_tracer(app, tmp_path, kir_cli, monkeypatch, hostile_library_path):
    """KIR_TRACE=text kir record: the recorder and the tracer."""
    monkeypatch.setenv("KIR_TRACE", "text")
    result = kir_cli("record", "-o", tmp_path / "rec", "--", app)
    assert_ran(result)
    traced = [l for l in result.stderr.splitlines() if l.startswith("kir-trace launch")]
    assert len(traced) == 1 and override.AXPY in traced[0], result.stderr
    assert "kir: recorded" in result.stderr


def test_kir_trace_with_the_jit_client(app, tmp_path, kir_cli, monkeypatch, hostile_library_path):
    """KIR_HOOK_CLIENTS=libkir_jit.so kir trace: the tracer and the JIT client."""
    monkeypatch.setenv("KIR_HOOK_CLIENTS", str(LIB / "libkir_jit.so"))
    monkeypatch.setenv("KIR_JIT_CACHE", str(tmp_path / "cache"))
    result = kir_cli("trace", "--json", "--", app)
    assert_ran(result)
    [launch] = launches(result.stdout)
    assert (launch["api"], launch["kernel"]) == ("__proteus_launch_kernel", override.AXPY)
    registered = [e for e in map(json.loads, (l for l in result.stdout.splitlines() if l.startswith('{"event"')))
                  if e["event"] == "register-kernel"]
    assert [e["kernel"] for e in registered] == [override.AXPY]


# --- the nvcc-built twin: a real runtime, on the CPU and on the GPU --------------------

COMMANDS = {
    "run": (["run", "--jit-cache", "{tmp}/cache", "--"], {"KIR_TRACE": "json"}),
    "record": (["record", "-o", "{tmp}/rec", "--"], {"KIR_TRACE": "text"}),
    "trace": (["trace", "--json", "--"], {"KIR_HOOK_CLIENTS": str(LIB / "libkir_jit.so"),
                                          "KIR_JIT_CACHE": "{tmp}/cache"}),
}


def run_command(kir_cli, monkeypatch, tmp_path, verb, app, *args):
    options, env = COMMANDS[verb]
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    return kir_cli(*(o.replace("{tmp}", str(tmp_path)) for o in options), app, *args)


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_an_nvcc_library_registering_before_the_hook_exits_as_the_app_does(built, kir_cli, monkeypatch, tmp_path,
                                                                         verb):
    """Without a GPU the app's first cudaMalloc fails (exit 1); under each command
    it must still be the app's own exit, not the layer's abort (134)."""
    app = built["proteus_lib_app"]
    bare = subprocess.run([app], capture_output=True, text=True, timeout=120)
    result = run_command(kir_cli, monkeypatch, tmp_path, verb, app)
    assert "recursive_init_error" not in result.stderr, result.stderr
    assert result.returncode == bare.returncode, result.stderr


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_on_the_gpu_a_proteus_layout_library_under_two_clients(gpu, built, kir_cli, monkeypatch, tmp_path, verb):
    """issue 21, item 17 on the H200: the tracer beside the JIT client or the
    recorder, the app's launches through __proteus_launch_kernel: its output is
    unchanged and each launch is seen."""
    app = built["proteus_lib_app"]
    bare = subprocess.run([app, "3"], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0 and bare.stdout.startswith("checksum "), bare.stderr
    result = run_command(kir_cli, monkeypatch, tmp_path, verb, app, "3")
    assert "recursive_init_error" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert bare.stdout in result.stdout  # the app's checksum: bitwise the same
    trace = result.stdout if verb == "trace" else result.stderr
    if verb == "record":
        traced = [l for l in trace.splitlines() if l.startswith("kir-trace launch")]
        assert len(traced) == 3 and all("_Z5scaledPdi" in l for l in traced), trace[-3000:]
        # The three launches share one launch identity (same arguments), which the
        # recorder keeps once: all three seen, one stored (H200 run AA).
        assert "kir-record: recorded 1 of 3 launches" in result.stderr, result.stderr[-3000:]
    else:
        seen = launches(trace)
        assert [(e["api"], e["kernel"]) for e in seen] == [("__proteus_launch_kernel", "_Z5scaledPdi")] * 3, trace
    if verb == "run":
        assert "kir: jit: 3 launches looked up" in result.stderr, result.stderr[-3000:]


# --- an app a signal killed: said, with the shell's exit status ------------------------

KILLED = ["--", "sh", "-c", "kill -ABRT $$"]


@pytest.mark.parametrize("verb, options, line", [
    ("run", ["--jit-cache", "{tmp}/cache"], "kir: jit: the app was killed by SIGABRT"),
    ("record", ["-o", "{tmp}/rec"], "kir: the app was killed by SIGABRT; 0 launches recorded before it"),
    ("trace", [], "kir: the app was killed by SIGABRT"),
])
def test_an_app_killed_by_a_signal_is_named_so(tmp_path, kir_cli, verb, options, line):
    """`kir run` said "the client wrote no counters (the app was killed, or never
    loaded the hook)", not which signal, for the aborting app of item 17."""
    result = kir_cli(verb, *(o.replace("{tmp}", str(tmp_path)) for o in options), *KILLED)
    assert result.returncode == 128 + 6, result.stderr  # as a shell reports SIGABRT
    assert line in result.stderr.splitlines()[-1], result.stderr
    assert "no counters" not in result.stderr
