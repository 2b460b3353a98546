"""Start-up (issue 15): the `kir` command imports only what its verb needs. `kir
inspect` (listing, --kernels, --json) must not import llvmlite, cuda-bindings,
numpy, msgpack, Optuna, Dask or kir's record, replay, tune, jit and cache
modules; what a verb imports is read from `sys.modules` after it ran, and from
`python -X importtime`, in a fresh interpreter."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("llvmlite", "cuda", "numpy", "msgpack", "optuna", "dask", "distributed")
KIR_HEAVY = ("kir.record", "kir.recorder", "kir.replay", "kir.tune", "kir.jit", "kir.cache", "kir.mneme",
             "kir.distribute", "kir.ir")

PROBE = """
import json, sys
from kir.cli import main
try:
    status = main(json.loads(sys.argv[1]))
except SystemExit as exit:
    status = exit.code
sys.stdout.flush()
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def imported(*argv) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(map(str, argv)))], capture_output=True,
                          text=True, timeout=120)
    out = json.loads(proc.stderr.strip().splitlines()[-1])
    return out["status"], set(out["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(KIR_HEAVY))


@pytest.mark.parametrize("options", [[], ["--kernels"], ["--kernels", "--json"], ["--arch", "sm_90"]],
                         ids=["list", "kernels", "json", "arch"])
def test_inspect_imports_nothing_heavy(built, options):
    status, modules = imported("inspect", *options, built["kernels.fatbin"])
    assert status == 0
    assert heavy(modules) == []
    assert "kir.commands.replay" not in modules and "kir.commands.tune" not in modules


def test_help_and_version_import_no_command_module():
    for argv in (["--help"], ["--version"], ["inspect", "--help"]):
        status, modules = imported(*argv)
        assert status == 0, argv
        assert heavy(modules) == [], argv
        commands = {m for m in modules if m.startswith("kir.commands.")}
        assert commands <= {"kir.commands.inspect", "kir.commands.inputs"}, (argv, commands)


def test_a_verb_that_needs_more_still_gets_it(tmp_path):
    """The lazy import is per verb, not a loss: `kir replay --plan` of a missing
    record still fails as that verb does (its module and the record reader load)."""
    status, modules = imported("replay", "--plan", tmp_path / "absent.kirrec")
    assert status == 2
    assert "kir.commands.replay" in modules and "kir.record" in modules


def test_importtime_of_kir_inspect_lists_no_heavy_module(built):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kir", "inspect", str(built["kernels.fatbin"])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert names and heavy(names) == []
