"""Recording never kills the app it sits in (issue 21, items 2 and 7), on a real
GPU (skipped, visibly, without one): rec_faults (tests/fixtures/record_apps/faults.c)
with the real CUDA driver, as tests/record/test_record_faults_cpu.py runs it over the
host-memory one. An app with guard pages and a SIGSEGV handler of its own runs
to the end under `kir record` (its handler installed before the first CUDA call
or after it); a fault it does not handle, or a stack overflow on a thread that
records, ends it with its completed launches recorded; and an app that started
about 4000 threads, up to its thread limit (RLIMIT_NPROC), is recorded whole
instead of being killed by an uncaught std::system_error."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from faults_rig import assert_axpy_records, assert_whole_despite_the_limit, kir_record, summary_line, thread_limit  # noqa: F401


@pytest.fixture(scope="module")
def faults(gpu, built):
    return built["rec_faults"], built["kernels_sm90.cubin"]


def bare(app: Path, cubin: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(app), str(cubin), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_app_handling_its_own_faults_runs_to_the_end(faults, tmp_path, when):
    app, cubin = faults
    alone = bare(app, cubin, "guard", when, "end")
    assert alone.returncode == 0, alone.stderr[-2000:]
    result = kir_record(app, cubin, tmp_path / "rec", "guard", when, "end")
    assert result.returncode == 0, result.stderr[-3000:]  # main before issue 21: 139
    assert result.stdout == alone.stdout
    assert "guard: 48 faults handled" in result.stdout
    assert summary_line(result.stderr) == f"kir-record: recorded 2 of 2 launches in {tmp_path / 'rec'}"
    assert_axpy_records(tmp_path / "rec", [1.0, 2.0])


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_fault_the_app_does_not_handle_keeps_the_completed_launches(faults, tmp_path, when):
    """Installed first, the recorder waits for launch 3's record when the app gives
    the fault up; installed second, the app's handler replaced it: launch 3's
    record is there only if the writer had finished it."""
    app, cubin = faults
    out = tmp_path / "rec"
    result = kir_record(app, cubin, out, "guard", when, "crash")
    assert result.returncode == 128 + signal.SIGSEGV, result.stderr[-3000:]
    assert result.stdout.endswith("guard: 48 faults handled\nlaunch a=3 ok\n"
                                  "guard: now a fault that is not the handler's\n")
    kept = len(list((out / "records").glob("*.kirrec")))
    assert kept == 3 if when == "before" else kept in (2, 3), kept
    assert summary_line(result.stderr).startswith(
        f"kir: the app was killed by SIGSEGV; {kept} launches recorded before it ({out / 'records'}, complete)")
    assert_axpy_records(out, [1.0, 2.0, 3.0][:kept])


def test_a_stack_overflow_on_a_recording_thread_keeps_its_launch(faults, tmp_path):
    app, cubin = faults
    out = tmp_path / "rec"
    result = kir_record(app, cubin, out, "overflow")
    assert result.returncode == 128 + signal.SIGSEGV, result.stderr[-3000:]
    assert summary_line(result.stderr) == (
        f"kir: the app was killed by SIGSEGV; 2 launches recorded before it ({out / 'records'}, complete)")
    assert_axpy_records(out, [1.0, 2.0])


@pytest.mark.parametrize("free", [0, 2])
def test_an_app_of_4000_threads_at_its_thread_limit_is_recorded_whole(faults, thread_limit, free):
    """RLIMIT_NPROC 4000 above what the user runs: the app starts threads until
    refused (about 4000, the CUDA driver's own included), frees `free`, launches
    three times. Main before issue 21: killed, exit 134 (std::terminate)."""
    if os.geteuid() == 0:
        for node in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"):
            if os.path.exists(node) and (os.stat(node).st_mode & (stat.S_IROTH | stat.S_IWOTH)) != (
                    stat.S_IROTH | stat.S_IWOTH):
                pytest.skip(f"{node} is not open to other users: the app runs as an unprivileged user here")
    limited = thread_limit(4000)
    result = limited.record("threads", "5000", str(free), env={**os.environ, "KIR_RECORD_THREADS": "8",
                                                               "KIR_RECORD_CHUNK_SIZE": "4096"})
    assert_whole_despite_the_limit(result, limited.directory / "rec")
