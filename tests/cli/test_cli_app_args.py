"""`kir trace`, `kir record`, `kir run`: the app's command line is the app's (kir
parses no option after the app's path, nor after `--`), `kir trace -o FILE`
keeps the trace apart from the app's output, and launches print each argument
as its type says. No GPU needed: the CUDA runtime finds no driver, launches
made with cudaLaunchKernel still reach the hook (as in tests/hook/test_hook.py).
The app (tests/fixtures/cli_apps/trace_args.cu) prints its argv, one line per argument."""
from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import numpy
import pytest

from kir.app import gpu_driver_problem

APPS = Path(__file__).resolve().parents[1] / "fixtures" / "cli_apps"


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli-apps") / "trace_args"
    subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=sm_90", "-cudart", "shared",
                    str(APPS / "trace_args.cu"), "-o", str(out)], check=True, capture_output=True)
    return out


def argv_of(stdout: str) -> list[str]:
    return [line.split("=", 1)[1] for line in stdout.splitlines() if line.startswith("argv[")]


def test_options_after_the_app_are_the_apps(app, kir_cli, tmp_path):
    result = kir_cli("trace", app, "--json", "-o", tmp_path / "x", "--kernel", "y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert argv_of(result.stdout) == [str(app), "--json", "-o", str(tmp_path / "x"), "--kernel", "y"]
    assert not (tmp_path / "x").exists()  # not kir's -o
    trace = [l for l in result.stdout.splitlines() if l.startswith("kir-trace ")]
    assert any(l.startswith("kir-trace launch typed(") for l in trace)  # text: not kir's --json


def test_double_dash_and_kir_options_before_the_app(app, kir_cli):
    result = kir_cli("trace", "--json", "--", app, "--", "--json")
    assert result.returncode == 0, result.stderr
    assert argv_of(result.stdout) == [str(app), "--", "--json"]
    assert any(l.startswith('{"event":"launch"') for l in result.stdout.splitlines())


def test_no_app_is_a_usage_error(kir_cli):
    for args in (["trace"], ["trace", "--json"], ["trace", "--"], ["record"], ["run", "--jit-cache", "c"]):
        result = kir_cli(*args)
        assert result.returncode == 2 and "no program to run" in result.stderr, args


def test_trace_to_a_file(app, kir_cli, tmp_path):
    out = tmp_path / "trace.jsonl"
    out.write_text("an earlier trace\n")  # replaced
    result = kir_cli("trace", "--json", "-o", out, app, "a b")
    assert result.returncode == 0, result.stderr
    # stdout is the app's alone, exactly as without kir
    bare = subprocess.run([app, "a b"], capture_output=True, text=True)
    assert result.stdout == bare.stdout
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] == "launch"] == ["launch", "launch"]
    assert {e["event"] for e in events} >= {"register-fatbin", "register-kernel", "launch"}


def test_record_and_run_pass_the_apps_arguments(app, kir_cli, tmp_path):
    result = kir_cli("record", "-o", tmp_path / "rec", app, "--json", "-o", "x", cwd=tmp_path)
    assert argv_of(result.stdout) == [str(app), "--json", "-o", "x"], result.stderr
    # Without a driver nothing is recorded, and kir record says so (test_record_without_a_driver_fails).
    assert result.returncode == (0 if gpu_driver_problem() is None else 1) and not (tmp_path / "x").exists()
    result = kir_cli("run", "--jit-cache", tmp_path / "cache", app, "--all", "--stats", "s", cwd=tmp_path)
    assert argv_of(result.stdout) == [str(app), "--all", "--stats", "s"], result.stderr
    assert result.returncode == 0 and not (tmp_path / "s").exists()


def f32_text(value: float) -> str:
    return str(numpy.float32(value))  # the shortest text that reads back the same float32


def test_arguments_print_as_their_types_say(app, kir_cli):
    result = kir_cli("trace", "--json", app)
    launches = [json.loads(l) for l in result.stdout.splitlines() if l.startswith('{"event":"launch"')]
    typed, plain = launches
    assert typed["demangled"] == ("typed(float, int, double*, unsigned long long, double, bool, short, "
                                  "unsigned char, Pair, long long, float)")
    pair = struct.unpack("<Q", struct.pack("<ii", 1, 2))[0]
    assert typed["values"] == [f32_text(2.5), "-1024", hex(0x7F0012345678), str(2**64 - 1), repr(1e-300),
                               "true", "-7", "200", hex(pair), "-5000000000", f32_text(0.1)]
    assert f32_text(0.1) == "0.1" and f32_text(2.5) == "2.5"
    # `args` keep the raw bits: little-endian hex of each value's bytes
    raw = [struct.pack("<f", 2.5), struct.pack("<i", -1024), struct.pack("<Q", 0x7F0012345678),
           struct.pack("<Q", 2**64 - 1), struct.pack("<d", 1e-300), b"\1", struct.pack("<h", -7), b"\xc8",
           struct.pack("<ii", 1, 2), struct.pack("<q", -5000000000), struct.pack("<f", 0.1)]
    assert typed["args"] == [hex(int.from_bytes(b, "little")) for b in raw]
    # extern "C": the name gives no signature, values stay raw
    assert plain["kernel"] == "plain"
    assert plain["values"] == plain["args"] == [hex(struct.unpack("<I", struct.pack("<f", 2.5))[0]), hex(7)]
    # the text trace prints the typed values
    text = kir_cli("trace", app).stdout
    line = next(l for l in text.splitlines() if l.startswith("kir-trace launch typed("))
    assert f" args=[{','.join(typed['values'])}] " in line


def test_trace_into_a_closed_pipe_ends_quietly(app):
    """`kir trace APP | head -1`: kir drops the trace lines once the reader left (still
    draining the app's pipe), with no traceback and no 'Exception ignored' message."""
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "kir", "trace", app, *["x"] * 2000], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    status = proc.wait(timeout=120)
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert status in (0, 141)  # the app's: it may itself be ended by SIGPIPE writing its argv


def test_record_without_a_driver_fails_and_says_why(app, built, kir_cli, tmp_path):
    """Issue 26: without a usable driver `kir record` printed the app's output, "recorded 0
    launches" and exited 0, leaving no directory for `kir records` to read."""
    if gpu_driver_problem() is None:
        pytest.skip("this machine has a usable GPU driver")
    result = kir_cli("record", "-o", tmp_path / "rec", app, "a")
    assert argv_of(result.stdout) == [str(app), "a"]  # the app ran, its output passed through
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("kir: error: nothing was recorded: no usable GPU driver on this machine (")
    assert ("libcuda.so.1" in last or "CUDA: " in last) and ("HIP: " in last or "libamdhip64" in last)
    # A program that is no GPU app (a shell) is not told about drivers: its status is kept.
    shell = kir_cli("record", "-o", tmp_path / "rec", "--", "sh", "-c", "exit 3")
    assert shell.returncode == 3 and "nothing was recorded" not in shell.stderr


def test_trace_of_an_app_that_launched_nothing_without_a_driver_fails(built, kir_cli, tmp_path):
    if gpu_driver_problem() is None:
        pytest.skip("this machine has a usable GPU driver")
    app = built["app"]  # finds no device and launches nothing
    for args in ([], ["-o", str(tmp_path / "t.txt")], ["--json"]):
        result = kir_cli("trace", *args, app)
        assert result.returncode == 1, (args, result.stderr)
        assert "kir: error: no launch was traced: no usable GPU driver on this machine (" in result.stderr


def test_trace_of_launches_without_a_driver_is_not_an_error(app, kir_cli):
    """Launches through cudaLaunchKernel reach the hook without a driver: they are traced,
    and the app's status stands."""
    result = kir_cli("trace", app)
    assert result.returncode == 0 and "no usable GPU driver" not in result.stderr
    assert any(l.startswith("kir-trace launch ") for l in result.stdout.splitlines())
