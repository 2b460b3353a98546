"""Running rec_faults (tests/fixtures/record_apps/faults.c) under `kir record` and checking
its records, on the host-memory stub driver or a real GPU, and at a thread limit
(`thread_limit`). Shared by tests/record/test_record_faults*.py and tests/native."""
from __future__ import annotations

import os
import re
import resource
import shutil
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
