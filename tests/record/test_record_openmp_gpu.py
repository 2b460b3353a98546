"""OpenMP target regions from clang-22 (C) and flang-22 (Fortran) on a GPU (issue 27,
item 5): the programs of tests/support/openmp_apps.py run through LLVM 22's
libomptarget (its CUDA plugin loads the region's cubin with cuModuleLoadDataEx and
launches it with cuLaunchKernel) under `kir record`, which gives each region's record
the IR of its region — from another build of the same source (the C program's
-fopenmp-target-jit build in another directory: other file ids in the kernel names, so
matched by region identity) or from a bitcode file (`--ir`: Fortran's device IR) — then
`kir replay` of the launched code and of the IR, and `kir tune` of the record.

Needs an NVIDIA GPU, libomptarget.so.22 (apt's liboffload-22) and the programs: built
here by clang-22/flang-22, or prebuilt (KIR_OPENMP_APPS=DIR, from `python
tests/support/openmp_apps.py DIR` on a machine with the compilers)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import openmp_apps
from kir.omp import region_key
from kir.record import Recording

OUTPUT = {"c_app": "1.000000 511.000000", "fortran_app": "1.0000  511.0000"}
IR_OF = {"c_app": "c_ir_app", "fortran_app": "fortran_ir"}


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    given = os.environ.get("KIR_OPENMP_APPS")
    if given:
        return openmp_apps.prebuilt(Path(given))
    return openmp_apps.built_apps(tmp_path_factory.mktemp("openmp"))


@pytest.mark.parametrize("app", ["c_app", "fortran_app"])
def test_an_openmp_region_is_recorded_with_its_ir_replayed_and_tuned(gpu, apps, app, kir_cli, tmp_path, monkeypatch):
    if app not in apps or IR_OF[app] not in apps:
        pytest.skip(f"{app} is not built here")
    monkeypatch.setenv("OMP_TARGET_OFFLOAD", "MANDATORY")  # no silent fallback to the host
    out = tmp_path / "rec"
    recorded = kir_cli("record", "-o", out, "--ir", apps[IR_OF[app]], "--", apps[app])
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    assert recorded.stdout.split() == OUTPUT[app].split()
    [record] = Recording(out).records()
    assert region_key(record.kernel.name) and record.kernel.ir is not None, recorded.stderr[-2000:]
    assert "the region's IR from" in recorded.stderr
    for code in ("launched", "ir"):
        replayed = kir_cli("replay", "--all", out, "--code", code, "--json")
        assert replayed.returncode == 0, replayed.stderr[-3000:]
        [result] = json.loads(replayed.stdout)["records"]
        assert result["status"] == "passed", result
    pytest.importorskip("optuna")
    tuned = kir_cli("tune", record.path, "--preset", "compiler", "--trials", "6", "--seed", "1", "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    [r] = json.loads(tuned.stdout)["records"]
    assert r["recorded"]["verified"]
    done = [t for t in r["trials"] if t["state"] == "complete"]
    assert len(done) >= 3 and all(t["result"]["verified"] for t in done), r["trials"]
