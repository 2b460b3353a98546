"""The suite as a new user runs it (issue 21, item 16): `bash tests/run.sh` in a
plain environment — Debian's python3, `env -i` with Debian's PATH — failed a test
that passed on the development and CI machines, because they set
PYTHONUNBUFFERED. CI now runs it in such an environment (.ci/run), and a test
binary this machine cannot build skips the tests that need it, as on a GPU
machine without clang-22."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import build as fixture_build

ROOT = Path(__file__).resolve().parents[2]
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_ci_runs_the_suite_in_a_new_users_environment(tmp_path):
    """.ci/run hands tests/run.sh nothing of its caller's environment but HOME, a
    plain PATH and CI=true, and passes its arguments on."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    (checkout / "tests").mkdir()
    (checkout / ".ci" / "run").write_bytes((ROOT / ".ci" / "run").read_bytes())
    # tests/run.sh stands in: it writes the environment and arguments it got
    (checkout / "tests" / "run.sh").write_text('printf "%s\\n" "$@" > args\nexec env -0 > environment\n')
    # scripts/lint.sh (the style gate, run first) stands in the same way
    (checkout / "scripts").mkdir()
    (checkout / "scripts" / "lint.sh").write_text('env -0 > lint-environment\n')
    home = tmp_path / "home"
    caller = {**os.environ, "HOME": str(home), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
              "PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": str(tmp_path / "venv"), "LD_LIBRARY_PATH": "/opt/cuda/lib64",
              "CUDA_VISIBLE_DEVICES": "3", "KIR_TRACE": "json", "LC_ALL": "C.UTF-8", "CI": "1"}
    proc = subprocess.run(["bash", checkout / ".ci" / "run", "tests/test_cache.py", "-x"], env=caller,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = dict(v.split("=", 1) for v in (checkout / "environment").read_text().split("\0") if v)
    for made_by_bash in ("PWD", "OLDPWD", "SHLVL", "_"):
        seen.pop(made_by_bash, None)
    assert seen == {"PATH": PLAIN_PATH, "HOME": str(home), "CI": "true"}
    linted = dict(v.split("=", 1) for v in (checkout / "lint-environment").read_text().split("\0") if v)
    assert {k: v for k, v in linted.items() if k not in ("PWD", "OLDPWD", "SHLVL", "_")} == seen
    assert (checkout / "args").read_text().splitlines() == ["tests/test_cache.py", "-x"]


def test_a_fixture_this_machine_cannot_build_skips_the_test(monkeypatch):
    """test_jit_gpu.py asked for built["jit_app"] on a GPU machine without clang-22
    and failed with KeyError: 'jit_app' instead of skipping like the tests that check
    by hand. A fixture whose tools are missing here skips, naming them."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no compiler of any kind
    built = fixture_build.Built({"kernels.fatbin": Path("/built/kernels.fatbin")})
    assert built["kernels.fatbin"] == Path("/built/kernels.fatbin")
    with pytest.raises(pytest.skip.Exception, match=r"fixture jit_app is not built here: .*clang-22.*nvcc"):
        built["jit_app"]
    with pytest.raises(KeyError):
        built["no such fixture"]


def test_the_callers_kir_settings_do_not_reach_the_tests(tmp_path):
    """A kir user's shell may export KIR_* settings; `kir record` passes them on to
    the recorder (its options add to the environment), so test_record_defaults saw
    KIR_RECORD_KERNELS among the defaults. The suite drops them (conftest)."""
    caller = {**os.environ, "KIR_RECORD_KERNELS": "zzz", "KIR_RECORD_REACHABLE": "1", "KIR_HOOK_LOG": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{ROOT / 'tests' / 'record' / 'test_record_reader.py'}::test_record_defaults"],
                          env=caller, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
