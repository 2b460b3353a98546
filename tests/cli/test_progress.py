"""Progress of the long commands (kir.progress): on a terminal (a pseudo-terminal
from the `pty` module) each verb shows its progress line on stderr and erases it;
through a pipe, with --no-progress or with KIR_PROGRESS=0 nothing of it appears,
and stdout never carries it (tables and --json stay clean)."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from mneme_writer import kernel_ir, write_recording  # noqa: F401  (the kernel_ir fixture)
from replay_records import KERNELS, make_record
from saxpy_record import saxpy, write_record  # noqa: F401  (the saxpy fixture)

TESTS = Path(__file__).resolve().parents[1] / "support"  # the rigs a child imports
ERASE = "\r\x1b[K"


def on_terminal(*args, stdout_too: bool = True, env: dict | None = None) -> tuple[int, str, str]:
    """Run `kir ARGS` with stderr (and stdout, unless stdout_too is False: then a pipe)
    on a pseudo-terminal: (exit status, what the terminal got, stdout when piped)."""
    controller, terminal = pty.openpty()
    environment = {**{k: v for k, v in os.environ.items() if k != "KIR_PROGRESS"}, **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "kir", *map(str, args)], stderr=terminal,
                            stdout=terminal if stdout_too else subprocess.PIPE, env=environment)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed (Linux: EIO)
            break
        if not chunk:
            break
        seen += chunk
    piped = b"" if stdout_too else proc.stdout.read()
    status = proc.wait()
    os.close(controller)
    return status, seen.decode(), piped.decode()


def piped(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def shown_and_erased(screen: str, label: str) -> None:
    """`label`'s progress line was drawn, and erased before anything else was printed."""
    start = screen.index(f"\rkir: {label}")
    rest = screen[start:]
    line_end = rest.index("\x1b[K")  # each frame ends by erasing what an older, longer one left
    assert "\n" not in rest[:line_end]  # a frame is one line, redrawn in place
    erased = rest.index(ERASE, line_end)
    after = rest[erased + len(ERASE):]
    assert f"\rkir: {label}" not in after  # not drawn again: nothing of it is left on the screen


@pytest.fixture
def replay_recording(tmp_path, built) -> Path:
    directory = tmp_path / "rec"
    for name in KERNELS:
        make_record(directory, built["kernels_sm90.cubin"], name)
    return directory


def test_inspect_kernels(built):
    status, screen, _ = on_terminal("inspect", "--kernels", built["app"])
    assert status == 0
    shown_and_erased(screen, "decoding images")
    assert "_Z4axpyfPKfPfi" in screen


def test_several_files_and_stdout_piped(built):
    """stderr on a terminal, stdout piped: the progress goes to the terminal only."""
    status, screen, out = on_terminal("inspect", "--kernels", "--json", built["app"], built["librdc.a"],
                                      stdout_too=False)
    assert status == 0
    shown_and_erased(screen, "reading files")
    assert "\r" not in out and "kir:" not in out
    assert [f["path"] for f in json.loads(out)["files"]] == [str(built["app"]), str(built["librdc.a"])]


def test_hash(built):
    status, screen, out = on_terminal("hash", "--jsonl", built["app"], built["librdc.a"], stdout_too=False)
    assert status == 0
    shown_and_erased(screen, "hashing file 1/2, images")
    assert "hashing file 2/2" in screen
    assert all(json.loads(line)["schema"] == "kir.hash/1" for line in out.splitlines())


def test_extract(built, tmp_path):
    status, screen, out = on_terminal("extract", built["app"], "-o", tmp_path / "out", stdout_too=False)
    assert status == 0
    shown_and_erased(screen, "extracting")
    assert sorted(out.splitlines()) == sorted(str(p) for p in (tmp_path / "out").iterdir())


def test_diff(built):
    status, screen, _ = on_terminal("diff", built["app"], built["app_rdc"])
    assert status in (0, 1)
    shown_and_erased(screen, "decoding A, image")
    assert "decoding B, image" in screen


def test_replay_all(replay_recording):
    status, screen, out = on_terminal("replay", "--all", replay_recording, "--plan", "--json", stdout_too=False)
    assert status == 0, screen
    shown_and_erased(screen, f"replaying records 0/{len(KERNELS)}")
    assert f"replaying records {len(KERNELS)}/{len(KERNELS)}" in screen
    assert len(json.loads(out)["records"]) == len(KERNELS)


def test_import_mneme(tmp_path, kernel_ir):  # noqa: F811
    write_recording(tmp_path / "mneme", kernel_ir)
    status, screen, _ = on_terminal("import-mneme", tmp_path / "mneme", "-o", tmp_path / "kir")
    assert status == 0, screen
    shown_and_erased(screen, "converting instances")
    assert "2 records written" in screen


def test_tune(tmp_path, saxpy):  # noqa: F811
    """kir tune counts trials (over a stand-in executor: tests/support/tune_fakes.py)."""
    pytest.importorskip("optuna")
    write_record(tmp_path / "rec", saxpy)
    status, screen, out = on_terminal("tune", tmp_path / "rec", "--trials", "5", "--seed", "1", "--executor",
                                      "tune_fakes:modelled", "--json", stdout_too=False,
                                      env={"PYTHONPATH": str(TESTS)})
    assert status == 0, screen
    shown_and_erased(screen, "tuning: trial 0/5")
    assert "tuning: trial 5/5" in screen
    assert len(json.loads(out)["records"][0]["trials"]) == 5


@pytest.mark.parametrize("how", ["--no-progress", "KIR_PROGRESS=0"])
def test_turned_off_on_a_terminal(built, how):
    args = ["inspect", "--kernels", built["app"]]
    env = None
    if how == "--no-progress":
        args.insert(1, how)
    else:
        env = {"KIR_PROGRESS": "0"}
    status, screen, _ = on_terminal(*args, env=env)
    assert status == 0 and "_Z4axpyfPKfPfi" in screen
    assert "kir: decoding" not in screen and "\x1b[K" not in screen


def test_never_through_a_pipe(built, tmp_path, replay_recording):
    for args in (["inspect", "--kernels", built["app"], built["librdc.a"]], ["hash", built["app"]],
                 ["extract", built["app"], "-o", tmp_path / "out"], ["diff", built["app"], built["app"]],
                 ["replay", "--all", replay_recording, "--plan"]):
        result = piped(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "\r" not in result.stdout + result.stderr and "\x1b" not in result.stdout + result.stderr, args


def test_the_progress_object():
    """Progress itself, on a pseudo-terminal: the first and last states are drawn, the
    ones between at most once per interval, the line never wraps, clear() erases it."""
    from kir.progress import Progress
    controller, terminal = pty.openpty()
    with open(terminal, "w", closefd=True) as stream:
        progress = Progress("working", total=1000, stream=stream)
        assert progress.active
        for i in range(1001):
            progress.update(i, item="x" * 500)  # a long item: cut to the terminal's width
        progress.close()
    screen = b""  # the terminal's side is closed: read what it got, to the end (EIO)
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.close(controller)
    screen = screen.decode()
    frames = [f for f in screen.split("\r") if f.startswith("kir: working")]
    assert frames[0].startswith("kir: working 0/1000") and frames[-1].startswith("kir: working 1000/1000")
    assert len(frames) < 50  # not one a call
    assert screen.endswith(ERASE)
    with open(os.devnull, "w") as null:  # not a terminal: inactive, writes nothing
        assert not Progress("x", stream=null).active
