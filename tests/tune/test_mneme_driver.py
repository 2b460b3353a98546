"""A Mneme-style driver on kir with no workaround (issue 24, done-when):
examples/mneme_driver/mneme_tune.py, `mneme tune` written over kir's public Python API
(kir.mneme.convert, kir.tune.tune, kir.tune.write_results, kir.jit.clients), plays the
whole flow on a recording written as Mneme writes it: the records keyed by the app's
static hash (--app), tuned, the winner stored under the key of kir's reference client and
of the Proteus-style client declared in the cache, and Mneme's results folder. On the CPU
the trials run through tests/support/tune_fakes.py's `compiled` (the code compiled for
real by kir.jit, the time modelled); on the GPU, real replays."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")
pytest.importorskip("matplotlib")

from test_handoff import PROTEUS, PROTEUS_CONFIG

from kir import hashing
from kir.cache import Cache
from kir.jit.clients import declare
from kir.record import Record
from mneme_writer import KERNEL, kernel_ir, write_recording  # noqa: F401  (kernel_ir: a fixture)

DRIVER = Path(__file__).resolve().parents[2] / "examples" / "mneme_driver" / "mneme_tune.py"


def drive(*args, timeout=900) -> subprocess.CompletedProcess:
    support = str(Path(__file__).resolve().parents[1] / "support")  # the stand-in executors (tune_fakes)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [support, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(DRIVER), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def app_static(kir_cli, app) -> str:
    hashed = kir_cli("hash", app, "--jsonl")
    assert hashed.returncode == 0, hashed.stderr
    (static,) = {d["static"] for d in map(json.loads, hashed.stdout.splitlines()) if d["kernel"] == KERNEL}
    return static


def test_the_driver_uses_only_kirs_public_api():
    """No workaround: the driver reaches into no private name of kir's."""
    tree = ast.parse(DRIVER.read_text())
    private = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
               and not n.attr.startswith("__")]
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("kir")
                for a in n.names if a.name.startswith("_")]
    assert private == [] and imported == []


def check_flow(result, src, out, cache, app, kir_cli):
    assert result.returncode == 0, result.stdout + result.stderr
    static = app_static(kir_cli, app)
    summary = json.loads((out / "summary.json").read_text())
    entries = summary["records"]
    assert len(entries) == 2  # write_recording's two instances of affine
    for entry in entries:
        record = Record.load(entry["record"])
        assert record.kernel.static_hash == static  # keyed by the app, not by Mneme's module
        assert (out / entry["folder"] / "trials.csv").is_file() and (out / entry["folder"] / "best.json").is_file()
    handed = {}  # client -> {key: what the driver said}
    for line in result.stdout.splitlines():
        if line.startswith("  hand-off "):
            client, key, said = line[len("  hand-off "):].split(" ", 2)
            handed.setdefault(client, {})[key.rstrip(":")] = said
    assert set(handed) == {"reference", "proteus-client"}, result.stdout
    # The Proteus-style client's key, as it computes it at the app's launch (kir_jit_key with
    # its CONFIG records, the dims and launch bounds), for each record: the key handed to it.
    expected = set()
    for entry in entries:
        record = Record.load(entry["record"])
        l = record.launch
        expected.add(hashing.jit_key_of_launch(
            static, record.kernel.image.arch or "sm_90", l.args, record.kernel.jit_args,
            memory={r.address: record.prologue(r) for r in record.allocations}, grid=l.grid, block=l.block,
            specialize_grid=True, specialize_block=True, shared_bytes=l.shared_bytes,
            bounds=(l.block[0] * l.block[1] * l.block[2], 0), config=PROTEUS_CONFIG))
    assert set(handed["proteus-client"]) == expected
    # affine counts its launches in a __device__ variable (`launched`): code kir.jit compiles
    # holds its own copy of it, so it is verified in replay (which restores that copy) but
    # not stored for the app, where it would count into its own copy; said, for every client.
    for said in (s for by_key in handed.values() for s in by_key.values()):
        assert said.startswith("the compiled code holds its own copies of the device globals launched"), said
    assert Cache(cache).entries() == []


def test_mneme_style_driver_plays_the_whole_flow(kernel_ir, built, tmp_path, kir_cli):  # noqa: F811
    src, out, cache = tmp_path / "mneme", tmp_path / "results", tmp_path / "cache"
    write_recording(src, kernel_ir)
    declare(cache, PROTEUS)
    app = built["mneme_affine_app"]
    result = drive(src, "--app", app, "--jit-cache", cache, "--results-dir", out, "--preset", "compiler",
                   "--trials", 3, "--seed", 2, "--store", "always", "--executor", "tune_fakes:compiled")
    check_flow(result, src, out, cache, app, kir_cli)


def test_mneme_style_driver_on_the_gpu(gpu, kernel_ir, built, tmp_path, kir_cli):  # noqa: F811
    """The same flow with real replays, verified (the recorded outputs are affine's)."""
    src, out, cache = tmp_path / "mneme", tmp_path / "results", tmp_path / "cache"
    write_recording(src, kernel_ir)
    declare(cache, PROTEUS)
    app = built["mneme_affine_app"]
    result = drive(src, "--app", app, "--jit-cache", cache, "--results-dir", out, "--preset", "compiler",
                   "--trials", 6, "--seed", 2, "--store", "always")
    check_flow(result, src, out, cache, app, kir_cli)
    print(result.stdout)
