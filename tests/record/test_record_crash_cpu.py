"""The recorder's crash flush without a GPU (docs/recording.md, Crashes).

tests/native/cpp/crash_flush_test.cpp writes records as libkir_record.so does — one
before the crash, one on a writer thread that is still storing when the crash
comes, one still being built (the launch in flight) — through the same
component (libkir/recorder/crash_flush.cpp), then dies as its MODE says. The
recording is then read with kir.record (every chunk's checksum) and its
snapshots compared with the bytes the program wrote, computed here again.
`kir record` runs it too: its one crash line and its exit status.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kir.record import Record, Recording
from running import native_test_program, run_kir

SIGNALS = {"segv": signal.SIGSEGV, "bus": signal.SIGBUS, "fpe": signal.SIGFPE, "ill": signal.SIGILL,
           "abort": signal.SIGABRT, "terminate": signal.SIGABRT}
SEEDS = {"complete-1": 3, "complete-2": 5}  # the in-flight record's seed, 7, must not appear


@pytest.fixture(scope="module")
def crash_program() -> Path:
    return native_test_program("kir_crash_flush_test")


def run_program(program: Path, directory: Path, mode: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), str(directory), mode], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def snapshot_bytes(seed: int, epilogue: bool) -> bytes:
    """What crash_flush_test.cpp stores for a record: byte i = i*seed (+1 after)."""
    return bytes((i * seed + epilogue) & 0xFF for i in range(10000))


def assert_complete_records(directory: Path, names: set[str]) -> None:
    """Exactly `names` recorded, each whole: checksums, snapshots, no temporaries left."""
    recording = Recording(directory)
    records = {r.kernel.name: r for r in recording.records()}
    assert set(records) == names
    for name, record in records.items():
        record.check()  # every chunk read and its checksum verified
        seed = SEEDS[name]
        assert record.kernel.static_hash == f"{seed:016x}{1:016x}"
        assert record.prologue(0) == snapshot_bytes(seed, False)
        assert record.epilogue(0) == snapshot_bytes(seed, True)
    leftovers = [p.name for folder in ("records", "chunks") for p in (directory / folder).iterdir()
                 if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.parametrize("mode", sorted(SIGNALS))
def test_records_complete_before_the_signal_survive_it(crash_program, tmp_path, mode):
    proc = run_program(crash_program, tmp_path, mode)
    assert proc.returncode == -SIGNALS[mode], proc.stderr  # the signal's own disposition ran
    assert proc.stdout == f"crashing: {mode}\n"
    # complete-2 was still being stored when the signal came: the handler waited for it.
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


def test_a_stack_overflow_is_handled_on_the_alternate_stack(crash_program, tmp_path):
    proc = run_program(crash_program, tmp_path, "overflow")
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


def test_a_stack_overflow_on_another_protected_thread_is_handled(crash_program, tmp_path):
    """A thread that called crash::protect_this_thread() (the recorder's recording
    threads do) has an alternate stack of its own: its overflow waits for the writer."""
    proc = run_program(crash_program, tmp_path, "overflow-thread")
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


def test_the_handler_the_app_had_before_gets_the_fault_itself(crash_program, tmp_path):
    """The app's SA_SIGINFO handler, installed before, is called at once with the
    fault's own siginfo (SEGV_MAPERR at address 0, not the SI_TKILL of a raise()),
    so that it can tell its faults from others. It ends the process itself
    (_exit): the record in the writer is lost, the one before stays."""
    proc = run_program(crash_program, tmp_path, "chain")
    assert proc.returncode == 42, proc.stderr  # the app's handler ended the process
    assert proc.stdout == "crashing: chain\napp handler: code 1, address (nil)\n"  # SEGV_MAPERR
    assert "complete-1" in {r.kernel.name for r in Recording(tmp_path).records()}


def test_a_one_shot_handler_of_the_app_runs_once(crash_program, tmp_path):
    """SA_RESETHAND: the app's handler makes one guard page writable; the second
    guard page meets the default action, as without the recorder — after the flush."""
    proc = run_program(crash_program, tmp_path, "resethand")
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    assert proc.stdout == "crashing: resethand\napp handler: guard page\n"
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


def test_ignored_signals_stay_ignored_and_faults_still_kill(crash_program, tmp_path):
    proc = run_program(crash_program, tmp_path, "ignored")
    assert proc.returncode == -signal.SIGSEGV, proc.stderr  # the kernel does not let a fault be ignored
    assert proc.stdout == "crashing: ignored\nSIGFPE ignored\n"
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


@pytest.mark.parametrize("mode,segv_blocked", [("mask", 1), ("mask-nodefer", 0)])
def test_the_app_handler_runs_with_its_own_signal_mask(crash_program, tmp_path, mode, segv_blocked):
    """As the kernel would run it: its sa_mask (SIGUSR1) blocked, and the signal
    itself unless SA_NODEFER; then the program goes on past the fault it handled."""
    proc = run_program(crash_program, tmp_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"crashing: {mode}\napp handler: SIGSEGV blocked {segv_blocked}, SIGUSR1 blocked 1\n"
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


def test_a_writer_that_never_finishes_is_given_up_in_time(crash_program, tmp_path):
    start = time.monotonic()
    proc = run_program(crash_program, tmp_path, "stuck", KIR_RECORD_CRASH_WAIT_MS="400")
    elapsed = time.monotonic() - start
    assert proc.returncode == -signal.SIGSEGV
    assert 0.4 <= elapsed < 10, elapsed
    assert "did not finish in time (KIR_RECORD_CRASH_WAIT_MS); it is left out" in proc.stderr
    assert_complete_records(tmp_path, {"complete-1"})


def test_a_crash_on_the_writer_thread_does_not_wait_for_itself(crash_program, tmp_path):
    start = time.monotonic()
    proc = run_program(crash_program, tmp_path, "writer-segv")  # the default wait: 10 s
    assert proc.returncode == -signal.SIGSEGV
    assert time.monotonic() - start < 5
    assert "did not finish in time" not in proc.stderr
    assert_complete_records(tmp_path, {"complete-1"})


def test_exit_from_another_thread_joins_the_writer(crash_program, tmp_path):
    proc = run_program(crash_program, tmp_path, "exit-thread")
    assert proc.returncode == 3, proc.stderr
    assert_complete_records(tmp_path, {"complete-1", "complete-2"})


@pytest.mark.parametrize("mode", ["segv", "abort"])
def test_kir_record_reports_the_crash_in_one_line(crash_program, tmp_path, mode):
    """Under `kir record` (no GPU: the recorder disables itself; the program's own
    records stand for the recorder's): the app's status, and one line naming the
    signal and counting the whole records this run left."""
    out = tmp_path / "rec"
    result = run_kir("record", "-o", out, "--", crash_program, out, mode)
    number = SIGNALS[mode]
    assert result.returncode == 128 + number, result.stderr
    assert result.stdout == f"crashing: {mode}\n"
    lines = [line for line in result.stderr.splitlines() if line.startswith("kir:")]
    assert lines == [f"kir: the app was killed by {signal.Signals(number).name}; 2 launches recorded before it "
                     f"({out.resolve() / 'records'}, complete)"]
    assert "Traceback" not in result.stderr
    assert_complete_records(out, {"complete-1", "complete-2"})


def test_kir_record_says_which_records_are_broken(crash_program, tmp_path):
    out = tmp_path / "rec"
    result = run_kir("record", "-o", out, "--", crash_program, out, "segv")
    assert result.returncode == 128 + signal.SIGSEGV
    # A record damaged after the fact is counted as unreadable, not as recorded.
    path = sorted((out / "records").glob("*.kirrec"))[0]
    Record.load(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    from kir.commands.record import crash_summary
    line = crash_summary(out.resolve(), {}, signal.SIGBUS, 1)
    assert line == (f"kir: the app was killed by SIGBUS; 1 launch recorded before it "
                    f"({out.resolve() / 'records'}, 1 unreadable: kir records {out.resolve()})")
