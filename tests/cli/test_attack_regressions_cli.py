"""Regressions from the independent attack on kir (issue 11, section 4), each named
after its bug: settings and client libraries from the environment in setuid
processes, the trace descriptor, the --kernels regex dialect, and tracebacks or
aborts where exit 2 was due. All on the CPU: the apps are built here with gcc
against the stub HIP runtime (tests/fixtures/hip_stub_runtime.c), which the hook
interposes like the real one."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import kir
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)
from kir.app import hook_library

HERE = Path(__file__).resolve().parents[1]
STUB = HERE / "fixtures" / "hip_stub_runtime.c"


def gcc(*args) -> None:
    proc = subprocess.run(["gcc", *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def stub_runtime(tmp_path_factory) -> Path:
    """The stub libamdhip64.so: hipMalloc/hipFree from host memory."""
    directory = tmp_path_factory.mktemp("stub")
    gcc("-shared", "-fPIC", STUB, "-Wl,-soname,libamdhip64.so", "-o", directory / "libamdhip64.so")
    return directory


def hip_program(directory: Path, stub: Path, name: str, source: str) -> Path:
    """A C program linked against the stub HIP runtime."""
    (directory / f"{name}.c").write_text(source)
    gcc(directory / f"{name}.c", f"-L{stub}", "-lamdhip64", *rpath(stub), "-o", directory / name)
    return directory / name


# --- settings and clients from the environment in setuid processes ------------------

SETUID_PROGRAM = source("cli/attack_regressions_cli_setuid_program.c")

CLIENT = source("cli/attack_regressions_cli_client.c")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_setuid_process_ignores_hook_clients_and_kir_settings():
    """A setuid-root program run by `nobody` (AT_SECURE set by the kernel) with
    KIR_HOOK_CLIENTS naming a client: the client's constructor does not run, and
    the hook says once that it ignores the KIR_* settings. Run by root (no
    AT_SECURE), the same program loads the client: the test can fail."""
    directory = Path(tempfile.mkdtemp(prefix="kir-setuid-", dir="/tmp"))
    try:
        directory.chmod(0o755)
        mark = directory / "client-ran"
        (directory / "client.c").write_text(CLIENT)
        gcc("-shared", "-fPIC", f'-DMARK="{mark}"', directory / "client.c", "-o", directory / "client.so")
        (directory / "program.c").write_text(SETUID_PROGRAM)
        gcc(directory / "program.c", "-o", directory / "program", "-ldl")
        hook = directory / "libkir_hook.so"
        shutil.copy(hook_library(), hook)
        program = directory / "program"
        os.chown(program, 0, 0)
        program.chmod(0o4755)  # setuid root
        env = {"PATH": "/usr/bin:/bin", "KIR_HOOK_CLIENTS": str(directory / "client.so"),
               "KIR_HOOK_LOG": "1", "KIR_TRACE": "text"}

        secure = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                 program, hook], capture_output=True, text=True, env=env, timeout=60)
        assert secure.returncode == 0, secure.stderr
        assert secure.stdout.strip() == "euid=0 uid=65534"  # really setuid: AT_SECURE
        assert not mark.exists(), "the client's constructor ran in a setuid process"
        ignored = [l for l in secure.stderr.splitlines() if "AT_SECURE" in l]
        assert len(ignored) == 1 and "are ignored" in ignored[0], secure.stderr

        plain = subprocess.run([program, hook], capture_output=True, text=True, env=env, timeout=60)
        assert plain.stdout.strip() == "euid=0 uid=0"
        assert mark.exists(), plain.stderr  # the control: without AT_SECURE the client loads
        assert "AT_SECURE" not in plain.stderr
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --- the trace descriptor -----------------------------------------------------------

CLOBBER = source("cli/attack_regressions_cli_clobber.c")


def test_trace_descriptor_reused_by_the_app_gets_no_trace_lines(stub_runtime, tmp_path, kir_cli, hostile_library_path):
    app = hip_program(tmp_path, stub_runtime, "clobber", CLOBBER)
    data = tmp_path / "data.txt"
    result = kir_cli("trace", "--", app, data)
    assert result.returncode == 0, result.stderr
    assert data.read_text() == "the app's own data\n"  # no kir-trace line in the app's file
    lines = result.stdout.splitlines()
    assert any(re.fullmatch(r"wrote fd \d+", l) for l in lines), result.stdout
    allocs = [l for l in lines if l.startswith("kir-trace alloc")]
    frees = [l for l in lines if l.startswith("kir-trace free")]
    assert len(allocs) == 3 and len(frees) == 3, result.stdout  # the trace still reaches kir


def test_trace_does_not_wait_for_a_background_child(tmp_path):
    """`kir trace -- sh -c 'sleep 8 &'` ends when sh does: the background sleep holds
    no trace pipe (the client's descriptor is close-on-exec) and kir waits for the
    app, not for the pipe's end. Output goes to files so only kir's own wait counts."""
    out, err = tmp_path / "out", tmp_path / "err"
    start = time.monotonic()
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.run([sys.executable, "-m", "kir", "trace", "--", "sh", "-c", "sleep 8 & echo $!"],
                              stdout=o, stderr=e, timeout=60)
    elapsed = time.monotonic() - start
    sleeper = int(out.read_text().split()[-1])
    try:
        os.kill(sleeper, 15)
    except ProcessLookupError:
        pass
    assert proc.returncode == 0, err.read_text()
    assert elapsed < 4, f"kir trace took {elapsed:.1f} s"


OUTLIVES = source("cli/attack_regressions_cli_outlives.c")


def test_trace_child_outliving_kir_is_not_killed_by_sigpipe(stub_runtime, tmp_path, kir_cli, hostile_library_path):
    """kir trace ends with the app; a forked child (not exec'd: it keeps the trace
    pipe) that traces afterwards meets a pipe nobody reads: the write fails and
    the child runs on (SIGPIPE would kill it)."""
    app = hip_program(tmp_path, stub_runtime, "outlives", OUTLIVES)
    alive = tmp_path / "alive"
    result = kir_cli("trace", "--", app, alive)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not alive.exists():
        time.sleep(0.1)
    time.sleep(0.2)
    assert alive.read_text() == "alive\n"


# --- --kernel: one pattern dialect (tests/hook/test_kernel_pattern.py: every command) -------------

def test_trace_kernels_lookbehind_is_refused_before_the_app_runs(kir_cli):
    result = kir_cli("trace", "--kernels", "(?<=x)y", "--", "sh", "-c", "echo ran")
    assert result.returncode == 2 and "ran" not in result.stdout
    assert result.stderr.startswith("kir: error: --kernel '(?<=x)y': not a kir pattern: lookbehind "), result.stderr


def test_record_kernels_lookbehind_is_refused_before_the_app_runs(tmp_path, kir_cli):
    marker = tmp_path / "ran"
    result = kir_cli("record", "-o", tmp_path / "rec", "--kernels", "(?<=x)y", "--",
                     "sh", "-c", f"touch {marker}")
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("kir: error: --kernel '(?<=x)y': not a kir pattern: lookbehind (?<= at offset 0: "
                             "not supported\n"), result.stderr
    assert not marker.exists()


def test_record_kernels_accepts_the_common_dialect():
    from kir import _core
    pattern = _core.KernelPattern(r"^_Z\d+axpy|saxpy$")
    assert pattern.selects("_Z4axpyv") and pattern.search("saxpy") and not pattern.search("saxpy2")
    assert _core.KernelPattern("(?:gemm)+").search("sgemm")
    with pytest.raises(kir.KirError, match=r"named group \(\?P< at offset 0"):  # Python's only
        _core.KernelPattern("(?P<n>x)")
    with pytest.raises(kir.KirError, match="^not a kir pattern: "):
        _core.KernelPattern("(")


def test_recorder_with_an_invalid_kernels_setting_records_nothing_and_does_not_abort(stub_runtime, tmp_path):
    """KIR_RECORD_KERNELS set by hand to what kir refuses: the recorder says so
    once and records nothing; the app runs to its end (it aborted with exit 134)."""
    app = hip_program(tmp_path, stub_runtime, "alloc", "int hipMalloc(void**, unsigned long);\n"
                      "int main(void) { void* p; return hipMalloc(&p, 64); }\n")
    env = {**os.environ, "LD_PRELOAD": str(hook_library()),
           "KIR_HOOK_CLIENTS": str(kir.app.library("libkir_record.so")),
           "KIR_RECORD_DIR": str(tmp_path / "rec"), "KIR_RECORD_KERNELS": "(?<=x)y"}
    proc = subprocess.run([app], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = [l for l in proc.stderr.splitlines() if "KIR_RECORD_KERNELS" in l]
    assert len(said) == 1 and "recording nothing" in said[0], proc.stderr


# --- exit 2, never a traceback -----------------------------------------------------

def assert_usage_error(result, *needles):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("kir: error: "), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize("verb", ["trace", "record"])
def test_kernels_unbalanced_parenthesis_is_exit_2(verb, tmp_path, kir_cli):
    extra = ["-o", tmp_path / "rec"] if verb == "record" else []
    assert_usage_error(kir_cli(verb, *extra, "--kernels", "(", "--", "true"), "--kernel '('")


def test_hash_kernel_unbalanced_parenthesis_is_exit_2(built, kir_cli):
    assert_usage_error(kir_cli("hash", "--kernel", "(", built["app"]), "--kernel '('")


def test_inspect_negative_threads_is_exit_2(built, kir_cli):
    assert_usage_error(kir_cli("inspect", "--kernels", "-j", "-1", built["app"]), "-j/--threads -1")


def test_inspect_huge_threads_is_capped_at_the_core_count(built, kir_cli):
    """-j 100000 (and beyond 32 bits) decodes as -j 0 does, on at most one thread per core."""
    expected = kir_cli("inspect", "--kernels", "--json", built["app"])
    assert expected.returncode == 0, expected.stderr
    for j in ("100000", str(1 << 40)):
        result = kir_cli("inspect", "--kernels", "--json", "-j", j, built["app"])
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected.stdout


def test_inspect_huge_threads_starts_no_more_threads_than_cores(built):
    """Counted in-process: the threads alive (/proc/self/task) while the decoder's
    progress callback runs, with 100000 asked for."""
    binary = kir.open(built["app"])
    before = len(os.listdir("/proc/self/task"))
    alive = []
    binary.load_code(binary.images, 100000, lambda done, total: alive.append(len(os.listdir("/proc/self/task"))))
    assert alive and max(alive) - before < (os.cpu_count() or 1)


PROGRESS_RAISES = """
import sys, kir
binary = kir.open(sys.argv[1])
calls = []
def progress(done, total):
    calls.append(done)
    raise ValueError("stop at image %d" % done)
try:
    binary.load_code(binary.images, 2, progress)
except ValueError as error:
    print("raised:", error, "after", len(calls), "call")
"""


def test_parallel_decode_unwinds_an_exception_without_terminate(built):
    """An exception while the decoding threads run (here from the progress
    callback; std::bad_alloc under memory pressure took the same path) reaches
    the caller after every thread is joined: it ended in std::terminate (exit 134)."""
    proc = subprocess.run([sys.executable, "-c", PROGRESS_RAISES, built["app_compress_speed"]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"raised: stop at image \d+ after [12] call\n", proc.stdout), proc.stdout  # 2: both threads


STATIC = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("arg, needle", [
    ("2:i32:99999999999", "--arg '2:i32:99999999999'"),
    ("2:u64:-1", "--arg '2:u64:-1'"),
    ("2:f32:1e300", "--arg '2:f32:1e300'"),
    (f"{1 << 40}:i32:7", f"--arg '{1 << 40}:i32:7'"),
    ("-1:i32:7", "--arg '-1:i32:7'"),
])
def test_hash_dynamic_huge_arg_is_exit_2(arg, needle, kir_cli):
    assert_usage_error(kir_cli("hash", "--dynamic", STATIC, "--arch", "sm_90", f"--arg={arg}"), needle)


@pytest.mark.parametrize("option", ["--grid", "--block"])
def test_hash_dynamic_huge_grid_is_exit_2(option, kir_cli):
    big = str(1 << 40)
    assert_usage_error(kir_cli("hash", "--dynamic", STATIC, option, f"{big},1,1"), f"{option} '{big},1,1'")
    assert_usage_error(kir_cli("hash", "--dynamic", STATIC, "--bounds", f"{big},1"), "--bounds")


def test_hash_dynamic_largest_values_still_hash(kir_cli):
    top = str((1 << 32) - 1)
    result = kir_cli("hash", "--dynamic", STATIC, "--grid", f"{top},1,1", "--arg", f"{top}:u64:{(1 << 64) - 1}")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"[0-9a-f]{32}\n", result.stdout)
