"""The hand-off any client can find (issue 24 §1): clients declare how they derive their
JIT key in the cache directory (DIR/.jit/clients/NAME.json, kir.jit.clients), `kir run`
declares the reference client's, and `kir tune --jit-cache DIR` stores the winner under
the key of every declared client; records that share a key keep the fastest and say so.
On the CPU: the stub runtime and driver of tests/support/jit_rig.py, the stand-in trial
executors of tests/support/tune_fakes.py."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

pytest.importorskip("optuna")

from jit_rig import rig  # noqa: F401  (the stub runtime and driver)
from kir.cache import Cache
from kir.hashing import jit_key
from kir.jit.clients import ClientDescriptor, declare, declared
from saxpy_record import F32
from stub_cuda import AXPY
from tune_fakes import cli

TESTS = Path(__file__).resolve().parents[1]

# The Proteus-style client's CONFIG records and specialization (examples/proteus_client/client.cpp,
# Client::start; tests/jit/test_proteus_client.py checks the client computes this key).
PROTEUS_CONFIG = (("producer", b"proteus-client"), ("compiler", b"22.1.0"), ("opt", b"3"), ("codegen-opt", b"3"),
                  ("specialize", b"args,dims,bounds"), ("kind", b"ptx"))
PROTEUS = ClientDescriptor("proteus-client", PROTEUS_CONFIG, True, True, True, "launch", "ptx")


def axpy_record(rig, tmp_path, a: float = 2.5, name: str = "rec") -> Path:  # noqa: F811
    from test_tune import axpy_record as record  # tests/tune/test_tune.py
    return Path(record(rig, tmp_path, a, name))


def space(tmp_path) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"preset": "compiler", "maxrregcount": [0, 64]}))
    return path


def tune(record, cache, tmp_path, *extra):
    out = cli("tune", record, "--trials", "3", "--seed", "2", "--executor", "tune_fakes:compiled", "--space",
              space(tmp_path), "--jit-cache", cache, "--store", "always", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def kir_run(kir_cli, rig, cache, tmp_path, *options):  # noqa: F811
    d, fatbin, cubin, _ = rig
    stats = tmp_path / "stats.json"
    result = kir_cli("run", "--jit-cache", cache, "--no-compile", "--stats", stats, *options, "--", d / "app",
                     fatbin, cubin, "r")
    assert result.returncode == 0, result.stderr
    return json.loads(stats.read_text())


def test_every_declared_client_finds_the_tuned_code(rig, tmp_path, kir_cli):  # noqa: F811
    """`kir run --fp-contract off` declares its client; the Proteus-style client's descriptor
    is written beside it; one tune stores the winner under both keys (and the default
    reference client's): the non-default `kir run` hits it, and the Proteus-style client's
    key holds PTX (the kind it loads)."""
    cache = tmp_path / "cache"
    _, _, _, static = rig
    assert kir_run(kir_cli, rig, cache, tmp_path, "--fp-contract", "off")["hits"] == 0  # declares, misses
    [run_client], warnings = declared(cache)
    assert not warnings and run_client.name.startswith("kir-run-")
    assert dict(run_client.config)["fp-contract"] == b"off"
    declare(cache, PROTEUS)
    record = axpy_record(rig, tmp_path)
    out = tune(record, cache, tmp_path)
    handoffs = {h["client"]: h for h in out["records"][0]["handoffs"]}
    assert set(handoffs) == {"reference", run_client.name, "proteus-client"}
    assert all(h["stored"] for h in handoffs.values()), handoffs
    assert len({h["key"] for h in handoffs.values()}) == 3
    stats = kir_run(kir_cli, rig, cache, tmp_path, "--fp-contract", "off")
    assert stats["hits"] == 1 and stats["substituted"] == 1, stats
    assert Cache(cache).lookup(handoffs[run_client.name]["key"]).meta["tuned.client"] == run_client.name
    proteus_key = jit_key(static, "sm_90", [(1, F32, struct.pack("<f", 2.5))], grid=(1, 1, 1), block=(64, 1, 1),
                          shared_bytes=16, bounds=(64, 0), config=PROTEUS_CONFIG)
    assert handoffs["proteus-client"]["key"] == proteus_key
    entry = Cache(cache).lookup(proteus_key)
    assert entry.kind == "ptx" and f".entry {AXPY}" in entry.code.decode()
    # --client picks; an unknown name is exit 2.
    picked = tune(record, cache, tmp_path, "--client", "proteus-client")["records"][0]["handoffs"]
    assert [h["client"] for h in picked] == ["proteus-client"]
    bad = cli("tune", record, "--executor", "tune_fakes:compiled", "--jit-cache", cache, "--client", "nobody")
    assert bad.returncode == 2 and "--client nobody: not declared" in bad.stderr and "Traceback" not in bad.stderr


def test_a_bad_descriptor_is_passed_by_with_a_warning(rig, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"
    declare(cache, PROTEUS)
    bad = cache / ".jit" / "clients" / "broken.json"
    bad.write_text('{"format": "kir.jit-client/1", "name": "broken", "config": [["opt", "zz"]]}')
    os.chmod(bad, 0o600)
    found, warnings = declared(cache)
    assert [d.name for d in found] == ["proteus-client"]
    assert len(warnings) == 1 and "broken.json: config[0]: 'zz' is not hex" in warnings[0]
    out = cli("tune", axpy_record(rig, tmp_path), "--trials", "1", "--executor", "tune_fakes:compiled",
              "--jit-cache", cache, "--json")
    assert out.returncode == 0 and "kir: warning:" in out.stderr and "broken.json" in out.stderr, out.stderr


def test_records_that_share_a_key_keep_the_fastest_and_report_it(rig, tmp_path):  # noqa: F811
    """Two records of one launch (one key) tuned in one run, then again against the cache:
    the faster result stays under the key, and every meeting is a conflict in the JSON."""
    cache = tmp_path / "cache"
    slow_space = tmp_path / "slow.json"
    slow_space.write_text(json.dumps({"preset": "compiler", "opt_level": [0], "maxrregcount": [0]}))
    fast = axpy_record(rig, tmp_path, name="fast")
    slow = axpy_record(rig, tmp_path, name="slow")
    # The slow record first: stored; then the fast one replaces it (tune_fakes.model: O0 is slower).
    first = cli("tune", slow, "--trials", "1", "--executor", "tune_fakes:compiled", "--space", slow_space,
                "--jit-cache", cache, "--store", "always", "--json")
    first = json.loads(first.stdout)
    [h] = first["records"][0]["handoffs"]
    assert h["stored"] and h["conflict"] is None and first["conflicts"] == []
    second = tune(fast, cache, tmp_path)
    [h] = second["records"][0]["handoffs"]
    assert h["stored"] and h["conflict"]["kept"] == "this", h
    assert second["conflicts"] and second["conflicts"][0]["key"] == h["key"]
    ms = h["median_ms"]
    assert Cache(cache).lookup(h["key"]).meta["tuned.median_ms"] == f"{ms:.6g}"
    # The slow one again: not stored, the cache's faster entry is kept, and said.
    third = cli("tune", slow, "--trials", "1", "--executor", "tune_fakes:compiled", "--space", slow_space,
                "--jit-cache", cache, "--store", "always", "--json")
    [h3] = json.loads(third.stdout)["records"][0]["handoffs"]
    assert not h3["stored"] and h3["conflict"]["kept"] == "other" and "faster result" in h3["reason"], h3
    assert Cache(cache).lookup(h["key"]).meta["tuned.median_ms"] == f"{ms:.6g}"
    # Both in one run (one key, one entry): the conflict is reported in the text too.
    cache2 = tmp_path / "cache2"
    both = cli("tune", slow, fast, "--trials", "3", "--seed", "2", "--executor", "tune_fakes:compiled", "--space",
               space(tmp_path), "--jit-cache", cache2, "--store", "always")
    assert both.returncode == 0, both.stderr
    assert "conflict: key" in both.stdout
    entries = Cache(cache2).entries()
    assert len(entries) == 1


def test_code_holding_its_own_device_globals_is_not_handed_off(rig, tmp_path):  # noqa: F811
    """axpy reading a __device__ variable (tests/fixtures/jit_axpy.cu, KIR_DEVICE_GLOBAL):
    its trials verify in replay, which restores the compiled module's own copy of the
    variable, but in the app that copy is not the program's variable. Nothing is stored,
    for any client, and the hand-off says why."""
    import subprocess

    from test_tune import axpy_record as record

    from build import CLANG, CLANG_CUDA  # tests/support/build.py
    if __import__("shutil").which(CLANG) is None:
        pytest.skip("clang-22 is not installed")
    ir = tmp_path / "global.bc"
    subprocess.run([*CLANG_CUDA, "--cuda-device-only", "-emit-llvm", "-c", "-O1", "-DKIR_DEVICE_GLOBAL",
                    str(TESTS / "fixtures" / "jit_axpy.cu"), "-o", str(ir)], check=True)
    path = record(rig, tmp_path, ir=ir.read_bytes())
    cache = tmp_path / "cache"
    declare(cache, PROTEUS)
    out = tune(path, cache, tmp_path)
    handoffs = out["records"][0]["handoffs"]
    assert {h["client"] for h in handoffs} == {"reference", "proteus-client"}
    for h in handoffs:
        assert not h["stored"] and h["key"], h
        assert h["reason"].startswith("the compiled code holds its own copies of the device globals kir_bias"), h
    assert Cache(cache).entries() == []
