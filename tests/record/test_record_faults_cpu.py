"""Recording never kills the app it sits in (issue 21, items 2 and 7), without a
GPU: `kir record` runs rec_faults (tests/fixtures/record_apps/faults.c, a
driver-API app) over tests/fixtures/record_stub_driver.c, a CUDA driver whose
device is host memory — the real hook layer and the real recorder, recording
real launches whose memory the tests read back.

Item 2: an app with a SIGSEGV handler of its own (guard pages, as a garbage
collector or a JIT has) runs to the end, its handler installed before the first
CUDA call (the recorder's comes second and must hand the app its own faults,
with their own siginfo) or after it (the app's replaces the recorder's); a fault
the app does not handle still ends the app with its launches recorded, and a
stack overflow on a thread that records is caught on that thread's alternate
stack. Item 7: an app that used up its thread limit (RLIMIT_NPROC, as
`ulimit -u`; or a pids cgroup) is recorded whole, its records stored on the
threads there are, and the refused thread starts counted.
tests/record/test_record_faults.py runs the same app on a GPU."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from faults_rig import (  # noqa: F401
    N,
    assert_axpy_records,
    assert_whole_despite_the_limit,
    kir_record,
    stub_environment,  # (thread_limit: a fixture)
    summary_line,
    thread_limit,
)

# --- running the app --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faults(built):
    return built["rec_faults"], built["kernels_sm90.cubin"]


# --- item 2: the app's own fault handler ------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_app_handling_its_own_faults_runs_to_the_end(faults, built, tmp_path, when):
    """48 guard-page faults on two threads (one of them recording), each handled
    by the app, which must see its own fault (si_code SEGV_ACCERR, the page's
    address); the recorder's handler stays, both launches are recorded."""
    app, cubin = faults
    env = stub_environment(built)
    bare = subprocess.run([app, cubin, "guard", when, "end"], capture_output=True, text=True, env=env, timeout=60)
    assert bare.returncode == 0, bare.stderr
    result = kir_record(app, cubin, tmp_path / "rec", "guard", when, "end", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == bare.stdout
    assert "guard: 48 faults handled" in result.stdout
    assert summary_line(result.stderr) == f"kir-record: recorded 2 of 2 launches in {tmp_path / 'rec'}"
    assert_axpy_records(tmp_path / "rec", [1.0, 2.0])


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_fault_the_app_does_not_handle_keeps_the_completed_launches(faults, built, tmp_path, when):
    """After its guard pages, the app stores through NULL: its handler gives the
    fault up to the default action (SIG_DFL, return). Launch 3's record is still
    being stored (each copy to the host takes 300 ms) when the fault comes.
    Installed first, the recorder's handler sees the app give up and waits for
    it: all three launches are recorded. Installed second, the app's handler
    replaced the recorder's (the app's right): the launches stored before are
    there, whole; the one in the writer is lost (docs/recording.md, Crashes)."""
    app, cubin = faults
    out = tmp_path / "rec"
    result = kir_record(app, cubin, out, "guard", when, "crash", env={**stub_environment(built),
                                                                      "STUB_SLOW_COPY_MS": "300"})
    assert result.returncode == 128 + signal.SIGSEGV, result.stderr[-3000:]
    assert result.stdout.endswith("guard: 48 faults handled\nlaunch a=3 ok\n"
                                  "guard: now a fault that is not the handler's\n")
    kept = 3 if when == "before" else 2
    assert summary_line(result.stderr).startswith(
        f"kir: the app was killed by SIGSEGV; {kept} launches recorded before it ({out / 'records'}, complete)")
    assert_axpy_records(out, [1.0, 2.0, 3.0][:kept])


def test_a_stack_overflow_on_a_recording_thread_keeps_its_launch(faults, built, tmp_path):
    """The second thread records launch 2, then overflows its stack while the
    record is being stored: the handler runs on that thread's alternate stack
    (every thread that records gets one) and waits for the record."""
    app, cubin = faults
    out = tmp_path / "rec"
    result = kir_record(app, cubin, out, "overflow", env={**stub_environment(built), "STUB_SLOW_COPY_MS": "300"})
    assert result.returncode == 128 + signal.SIGSEGV, result.stderr[-3000:]
    assert summary_line(result.stderr) == (
        f"kir: the app was killed by SIGSEGV; 2 launches recorded before it ({out / 'records'}, complete)")
    assert_axpy_records(out, [1.0, 2.0])


# --- item 7: a thread limit -------------------------------------------------------------------


@pytest.mark.parametrize("how,free,settings,env", [
    # the writer thread refused: the record is stored by the app's thread
    ("no-thread-left", 0, {}, {}),
    # two threads to be had: the writer's, and one of the 8 chunk writers it asks for
    ("two-threads-left", 2, {}, {}),
    # --reachable: the prologue stored by the app's thread, RecordBuilder::snapshot's own threads
    ("reachable", 0, {"reachable": True}, {}),
    # no device memory for a snapshot's copy: stored at once, the chunk writers on the app's thread
    ("device-full", 0, {}, {"STUB_DEVICE_BYTES": str(2 * 4 * N)}),
])
def test_an_app_at_its_thread_limit_is_recorded_whole(thread_limit, built, how, free, settings, env):
    """The app starts threads until the system refuses one (64 above what its user
    runs), frees `free` of them, then launches three times. It must run to the
    end, every launch recorded whole, and the recorder's summary must count the
    thread starts it was refused. Chunks of 4 KiB: 64 per buffer, work for 8 threads."""
    limited = thread_limit(64, {"driver/libcuda.so.1": stub_environment(built)["LD_LIBRARY_PATH"] + "/libcuda.so.1"})
    result = limited.record("threads", "1000", str(free), env={
        **os.environ, "LD_LIBRARY_PATH": str(limited.paths["driver/libcuda.so.1"].parent), "KIR_RECORD_THREADS": "8",
        "KIR_RECORD_CHUNK_SIZE": "4096", **env}, **settings)
    assert_whole_despite_the_limit(result, limited.directory / "rec")


