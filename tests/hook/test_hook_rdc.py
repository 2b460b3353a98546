"""Relocatable device code (nvcc -rdc=true) without a GPU: what the hook layer
exposes of a device-linked registration, and the replay plan of a record that
carries every unit's PTX.

rec_rdc (tests/fixtures/record_apps/rdc_main.cu + rdc_lib.cu, shared runtime)
registers, through __cudaRegisterLinkedBinary_*, one linked fatbin (`.nv_fatbin`:
the device-linked cubin, no PTX) whose version-2 wrapper lists the two units'
relocatable fatbins (`__nv_relfatbin`: each unit's relocatable cubin and PTX).
Registrations happen before main, without a driver. A client asks the layer
(kir_hook_kernel_code_units / kir_hook_kernel_code_unit) for each kernel's units;
the oracles are cuobjdump -all -xptx, `kir extract` and `kir inspect --json`.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir import _core, replay
from kir.errors import PlanError
from kir.record import Record
from record_builders import as_version_1

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"
TRANSFORM = "_Z13rdc_transformPKfPfi"
SCALE = "_Z9rdc_scalePfif"

CLIENT = source("hook/hook_rdc_client.c")


@pytest.fixture(scope="module")
def app(built):
    if "rec_rdc" not in built:
        pytest.skip("fixture rec_rdc not built here")
    return built["rec_rdc"]


@pytest.fixture(scope="module")
def units(app, tmp_path_factory):
    """What the client got from the layer: {kernel: (summary line, [unit PTX bytes])}."""
    work = tmp_path_factory.mktemp("rdc_hook")
    source = work / "client.c"
    source.write_text(CLIENT)
    client = work / "libclient.so"
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I", INCLUDE, source, "-o", client],
                   check=True)
    dump = work / "dump"
    dump.mkdir()
    # Without a GPU the app fails at its first cudaMalloc, after registration.
    subprocess.run([app], capture_output=True, text=True, timeout=120,
                   env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_HOOK_CLIENTS": str(client), "DUMP": str(dump)})
    got = {}
    for summary in dump.glob("*.txt"):
        name = summary.stem
        line = summary.read_text().strip()
        count = int(line.split()[0].split("=")[1])
        got[name] = (line, [(dump / f"{name}.{i}.ptx").read_bytes() for i in range(count)])
    return got


def test_trace_shows_one_linked_registration(app, kir_cli):
    result = kir_cli("trace", "--json", "--", app)
    events = [json.loads(l) for l in result.stderr.splitlines() + result.stdout.splitlines() if l.startswith("{")]
    fatbins = [e for e in events if e["event"] == "register-fatbin"]
    assert len(fatbins) == 1 and fatbins[0]["images"] == 1  # the linked fatbin: one cubin
    kernels = [e for e in events if e["event"] == "register-kernel"]
    assert sorted(k["kernel"] for k in kernels) == sorted([SCALE, TRANSFORM])
    assert all(k["params"] == 3 for k in kernels)


def test_hook_exposes_every_units_ptx(units, app, cuobjdump, tmp_path, kir_cli):
    assert set(units) == {TRANSFORM, SCALE}
    for name, (line, ptx) in units.items():
        # The linked fatbin holds no PTX; both units hold sm_90 PTX; one past the last is refused.
        assert line == "units=2 ptx=0 past=0 unit0=ptx:sm_90 unit1=ptx:sm_90", name
    # Both kernels come from the same registration: the same units, in the same order.
    assert units[TRANSFORM][1] == units[SCALE][1]
    hooked = units[TRANSFORM][1]
    # Oracle 1: cuobjdump's PTX files of the binary (the relocatable fatbins hold all of it).
    out = tmp_path / "cuobjdump"
    out.mkdir()
    subprocess.run([cuobjdump, "-all", "-xptx", "all", app], cwd=out, check=True, capture_output=True)
    oracle = sorted(p.read_bytes() for p in out.glob("*.ptx"))
    assert len(oracle) == 2
    # The layer hands out the entry's decoded bytes (NUL-terminated text); cuobjdump writes the text.
    assert sorted(p.rstrip(b"\0") for p in hooked) == oracle
    assert all(p.endswith(b"\0") and p.count(b"\0") == 1 for p in hooked)
    # Oracle 2: kir extract, and kir inspect's PTX images — all in __nv_relfatbin containers.
    result = kir_cli("extract", "-o", tmp_path / "extract", "--kind", "ptx", app)
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_bytes() for p in (tmp_path / "extract").glob("*.ptx")) == oracle
    report = json.loads(kir_cli("inspect", "--json", app).stdout)
    sections = {c["index"]: c["section"] for c in report["containers"]}
    ptx_images = [i for i in report["images"] if i["kind"] == "ptx"]
    assert {sections[i["container"]] for i in ptx_images} == {"__nv_relfatbin"}
    assert sorted(i["size"] for i in ptx_images) == sorted(len(p) for p in hooked)
    # One unit defines the kernel and declares the device function it calls (extern);
    # the other defines that function: only linking both rebuilds the kernel.
    texts = [p.decode() for p in hooked]
    calling = [t for t in texts if ".visible .entry _Z13rdc_transformPKfPfi(" in t]
    defining = [t for t in texts if ".visible .func (.param .b32 func_retval0) _Z7rdc_mixfi(" in t]
    assert len(calling) == len(defining) == 1 and calling != defining
    assert ".extern .func (.param .b32 func_retval0) _Z7rdc_mixfi" in calling[0]


# --- the plan for a record with units ------------------------------------------------------------


def rdc_record(tmp_path: Path, app: Path, cuobjdump: str, unit_arch: str = "sm_90") -> tuple[Record, list[bytes]]:
    """A record written by the C++ writer for rdc_transform: the image a cubin of the
    binary holding it, and the two units' real PTX (cuobjdump's) as ptx_units."""
    out = tmp_path / "objs"
    out.mkdir()
    subprocess.run([cuobjdump, "-all", "-xelf", "all", "-xptx", "all", app], cwd=out, check=True,
                   capture_output=True)
    ptx = [p.read_bytes() + b"\0" for p in sorted(out.glob("*.ptx"))]
    cubin = next(c.read_bytes() for c in sorted(out.glob("*.cubin"))
                 if any(k.name == TRANSFORM for k in _core.parse_cubin(c.read_bytes()).kernels))
    code = _core.parse_cubin(cubin)
    code.image_digest = _core.xxh3_128(cubin)
    from kir.hashing import kernel_static_hash
    static = kernel_static_hash(code, TRANSFORM)
    b = _core.RecordBuilder(str(tmp_path / "rec"), 4096)
    b.set_process(1, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(TRANSFORM, "rdc_transform(float const*, float*, int)", static, [0, 8, 16], [8, 8, 4])
    b.set_image("cubin", "sm_90", cubin)
    for unit in ptx:
        b.add_ptx_unit(unit_arch, unit)
    args = [(0x7F0000000000).to_bytes(8, "little"), (0x7F0000100000).to_bytes(8, "little"),
            (1024).to_bytes(4, "little")]
    b.set_launch("cudaLaunchKernel", static, (4, 1, 1), (256, 1, 1), 0, 0, args, 0)
    return Record.load(b.write()), ptx


def test_plan_links_the_units_from_ptx(app, cuobjdump, tmp_path, kir_cli):
    record, ptx = rdc_record(tmp_path, app, cuobjdump)
    assert [u.kind for u in record.kernel.ptx_units] == ["ptx", "ptx"] and record.kernel.ptx is None
    assert record.ptx_units() == ptx
    assert {u.chunk for u in record.kernel.ptx_units} <= record.chunk_names()
    p = replay.plan(record, "ptx", "sm_90")
    assert p.code.kind == "ptx" and p.code.units == 2 and p.code.arch == "sm_90"
    assert "2 relocatable units" in p.code.reason and "linked" in p.code.reason
    assert p.code_units() == ptx
    with pytest.raises(PlanError, match="2 PTX units to link"):
        p.code_bytes()
    assert p.hashes.static == p.hashes.recorded_static  # the image is the one the kernel hashes by
    # From the cubin nothing is linked.
    c = replay.plan(record, "cubin", "sm_90")
    assert c.code.units == 0 and c.code_units() == [] and c.code_bytes() == record.code("image")
    # The CLI's plan says so too.
    result = kir_cli("replay", record.path, "--plan", "--code", "ptx", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["code"]["units"] == 2
    # PTX newer than the device is refused.
    with pytest.raises(PlanError, match="newer than the device"):
        replay.plan(record, "ptx", "sm_80")


def test_records_without_units_read_as_before(tmp_path):
    """A record of version 1 without `ptx_units` (every record before them) reads with none."""
    b = _core.RecordBuilder(str(tmp_path), 4096)
    static = _core.static_hash("k", "cubin", [b"image"])
    b.set_process(1, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel("k", "k()", static, [], [])
    b.set_image("cubin", "sm_90", b"image")
    b.set_ptx("sm_90", b".version 8.0\0")
    b.set_launch("cudaLaunchKernel", static, (1, 1, 1), (1, 1, 1), 0, 0, [], 0)
    record = as_version_1(Path(b.write()))
    assert record.version == 1 and record.kernel.ptx_units == [] and record.ptx_units() == []
    import msgpack
    data = record.path.read_bytes()
    assert "ptx_units" not in msgpack.unpackb(data[40:], raw=False)["kernel"]
    p = replay.plan(record, "ptx", "sm_90")
    assert p.code.units == 0 and p.code_bytes() == b".version 8.0\0"
