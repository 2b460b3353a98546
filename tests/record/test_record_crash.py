"""Crash-safe recording on a real GPU (docs/recording.md, Crashes; skipped, visibly,
without one).

rec_crash (tests/fixtures/record_apps/crash.cu) is Mneme's crash test: a kernel
runs and completes, then the host dies — a store through NULL, abort(),
raise(SIGFPE / SIGBUS / SIGILL), an uncaught C++ exception, or exit() from
another thread. Under `kir record` each must end as it ends bare (the signal,
as a shell reports it: 128 + N; the exit status), with one line naming the
signal, and the recording must hold the completed launch, whole, replaying bit
for bit. In mode in-flight the crash comes while a second launch runs: its
record is absent.
"""
from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from record_gpu_rig import app_path, read_meta, replay

MODES = {"in-flight": signal.SIGSEGV, "segv": signal.SIGSEGV, "abort": signal.SIGABRT, "fpe": signal.SIGFPE, "bus": signal.SIGBUS,
         "ill": signal.SIGILL, "terminate": signal.SIGABRT}


def no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the default action, without writing a core


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                          preexec_fn=no_core)


def kir(*args) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "kir", *args)


@pytest.fixture(scope="module")
def crash_app(gpu, built) -> Path:
    return app_path(built, "rec_crash")


def assert_one_record_replays(out: Path) -> None:
    listing = kir("records", out, "--json")
    assert listing.returncode == 0, listing.stderr[-2000:]
    records = json.loads(listing.stdout)["records"]
    assert [r["demangled"].split("(")[0] for r in records] == ["scale_add"]
    path = out / "records" / records[0]["file"]
    read_meta(path)
    assert [p.name for p in (out / "records").iterdir() if p.name.startswith(".")] == []
    for code in ("cubin", "ptx"):
        status, result = replay(path, "--code", code)
        assert result["verified"] is True and result["mismatches"] == [], f"--code {code}: {result}"
        assert result["hashes_match"] is True and status == 0, f"--code {code}: {result}"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_crash_keeps_the_completed_launch(crash_app, tmp_path, mode):
    number = MODES[mode]
    bare = run(crash_app, mode)
    assert bare.returncode == -number, bare.stderr[-2000:]
    assert bare.stdout.startswith("crash n=65536 kernel ok")
    out = tmp_path / "rec"
    result = kir("record", "-o", out, "--", crash_app, mode)
    assert result.returncode == 128 + number, result.stderr[-3000:]
    assert result.stdout == bare.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("kir:")]
    assert lines == [f"kir: the app was killed by {signal.Signals(number).name}; 1 launch recorded before it "
                     f"({out.resolve() / 'records'}, complete)"], result.stderr[-3000:]
    assert_one_record_replays(out)


def test_exit_from_another_thread_keeps_the_completed_launch(crash_app, tmp_path):
    bare = run(crash_app, "exit-thread")
    assert bare.returncode == 3, bare.stderr[-2000:]
    out = tmp_path / "rec"
    result = kir("record", "-o", out, "--", crash_app, "exit-thread")
    assert result.returncode == 3, result.stderr[-3000:]
    assert result.stdout == bare.stdout
    assert f"kir: recorded 1 launch of 1 kernel in {out.resolve()}" in result.stderr
    assert_one_record_replays(out)
