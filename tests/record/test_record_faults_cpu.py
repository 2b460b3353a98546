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
tests/test_record_faults.py runs the same app on a GPU."""
from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path

import pytest

from kir.app import library
from kir.record import Recording
from kir.recorder import recorder_environment

N = 65536  # faults.c's floats per buffer
# A uid no process here runs as (RLIMIT_NPROC counts the tasks of the real uid,
# and ignores root's): the thread-limit tests run the app as it.
UNPRIVILEGED_UID = 48021


# --- running the app --------------------------------------------------------------------------


def stub_environment(built) -> dict[str, str]:
    """The app finds the host-memory driver (not in its RUNPATH: LD_LIBRARY_PATH)."""
    return {**os.environ, "LD_LIBRARY_PATH": str(built["rec_faults"].parent / ".rec_faults.work")}


def kir_record(app: Path, cubin: Path, out: Path, *args: str, options=(), env=None,
               preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", "record", *options, "-o", str(out), "--", str(app), str(cubin),
                           *args], capture_output=True, text=True, timeout=300, env=env, preexec_fn=preexec_fn)


def summary_line(stderr: str) -> str:
    """The recorder's summary at the app's exit, or `kir record`'s line on the crash
    (not the warnings about what may not replay, which also start with kir-record:)."""
    lines = [line for line in stderr.splitlines() if line.startswith(("kir-record: recorded ", "kir: the app was"))]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def assert_axpy_records(out: Path, launches: list[float]) -> None:
    """Exactly one whole record per launch of `launches` (a = 1, 2, 3 in this
    order, as faults.c launches them), each holding y before and after: x[i] = i,
    y[i] = 2i plus a * i for every launch before it (exact small integers)."""
    records = sorted(Recording(out).records(), key=lambda r: struct.unpack("<f", r.launch.args[0])[0])
    assert [struct.unpack("<f", r.launch.args[0])[0] for r in records] == launches
    x = array("f", range(N)).tobytes()
    for record in records:
        record.check()  # every chunk read back, its checksum verified
        a = struct.unpack("<f", record.launch.args[0])[0]
        x_at, y_at = (struct.unpack("<Q", record.launch.args[i])[0] for i in (1, 2))
        regions = {r.address: r for r in record.allocations}
        assert record.prologue(regions[x_at]) == x and record.epilogue(regions[x_at]) == x
        before = 2 + sum(b for b in (1.0, 2.0, 3.0) if b < a)
        assert record.prologue(regions[y_at]) == array("f", (before * i for i in range(N))).tobytes(), a
        assert record.epilogue(regions[y_at]) == array("f", ((before + a) * i for i in range(N))).tobytes(), a
    leftovers = [p.name for folder in ("records", "chunks") for p in (out / folder).iterdir() if p.name.startswith(".")]
    assert leftovers == []


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


def tasks_of(uid: int) -> int:
    """Threads of every process whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


class ThreadLimit:
    """Run the app under the recorder (the environment `kir record` makes) with
    RLIMIT_NPROC `headroom` tasks above what its user runs now — as
    UNPRIVILEGED_UID when we are root (whom the limit does not bind), from a
    directory that user owns, holding copies of what it loads (the app, the
    kernel, the hook and the recorder, and on the CPU the stub driver), since our
    own folders may be closed to it."""

    def __init__(self, headroom: int, files: dict[str, Path]) -> None:
        self.root = os.geteuid() == 0
        self.uid = UNPRIVILEGED_UID if self.root else os.getuid()
        if self.root:
            try:
                subprocess.run(["true"], check=True, preexec_fn=lambda: os.setuid(self.uid))
            except (OSError, subprocess.SubprocessError) as error:
                pytest.skip(f"cannot run as uid {self.uid} here (a user namespace without it?): {error}")
        self.directory = Path(tempfile.mkdtemp(prefix="kir-thread-limit-"))
        files = {**files, "lib/libkir_hook.so": library("libkir_hook.so"),
                 "lib/libkir_record.so": library("libkir_record.so")}
        self.paths = {}
        for name, source in files.items():
            self.paths[name] = self.directory / name
            self.paths[name].parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, self.paths[name])
        if self.root:
            for path in [self.directory, *self.directory.rglob("*")]:
                os.chown(path, self.uid, self.uid)
        self.limit = tasks_of(self.uid) + headroom

    def preexec(self) -> None:
        resource.setrlimit(resource.RLIMIT_NPROC, (self.limit, self.limit))
        if self.root:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

    def record(self, *args: str, env: dict[str, str], **settings) -> subprocess.CompletedProcess:
        """The app (with `args`) recorded into DIR/rec: recorder_environment(`settings`)."""
        environment = {**env, "LD_PRELOAD": str(self.paths["lib/libkir_hook.so"]),
                       "KIR_HOOK_CLIENTS": str(self.paths["lib/libkir_record.so"]),
                       **recorder_environment(self.directory / "rec", **settings)}
        return subprocess.run([str(self.paths["faults"]), str(self.paths["kernel.cubin"]), *args], capture_output=True,
                              text=True, timeout=300, env=environment, preexec_fn=self.preexec)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def thread_limit(faults):
    """`ThreadLimit(headroom, files)` holding the app and the kernel (and `files`)."""
    made = []

    def make(headroom: int, files=None) -> ThreadLimit:
        app, cubin = faults
        limit = ThreadLimit(headroom, {"faults": app, "kernel.cubin": cubin, **(files or {})})
        made.append(limit)
        return limit
    yield make
    for limit in made:
        limit.close()


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


THREADS_OUT = "launch a=1 ok\nlaunch a=2 ok\nlaunch a=3 ok\nthreads: all launches ok\n"


def assert_whole_despite_the_limit(result: subprocess.CompletedProcess, out: Path) -> None:
    """faults.c's `threads` mode ran to its end at its thread limit, recorded whole."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(then refused: a thread limit)" in result.stderr  # the limit was reached
    assert "terminate called" not in result.stderr
    assert result.stdout == THREADS_OUT
    summary = summary_line(result.stderr)
    refused = re.fullmatch(rf"kir-record: recorded 3 of 3 launches in {re.escape(str(out))}; (\d+) thread\(s\) could "
                           r"not be started \(a thread limit: ulimit -u, a pids cgroup\), their work done by fewer",
                           summary)
    assert refused and int(refused[1]) >= 1, summary
    assert_axpy_records(out, [1.0, 2.0, 3.0])
