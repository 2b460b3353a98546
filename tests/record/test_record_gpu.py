"""Kernel record and replay on a real GPU (skipped, visibly, without one).

Each program of tests/fixtures/record_apps runs bare, then under `kir record`
(same output, same status); its records name the kernels the binary holds
(`kir inspect --kernels`), and every record replays bit for bit through
`kir replay` from the cubin and from the PTX (and from the embedded LLVM IR for
the clang-built app). Programs and what each one checks:

  rec_vector_add        one launch; a grid-stride loop, so a replay with another
                        grid or block is a variant that still writes the same c
  rec_jacobi            four kernels launched repeatedly with swapped pointers
  rec_pointer_chase     pointers stored in device memory (a table of pointers, a
                        linked list over three buffers): replays only if every
                        buffer is back at its recorded address; `--reachable`
  rec_device_global     a __device__ array updated in place, a __constant__
  rec_streams_async     cudaMallocAsync / cudaFreeAsync on three streams
  rec_same_kernel_args  one kernel, 7 launches, 5 distinct: one record each
  rec_clang_ir          Proteus-embedded IR: `--code ir`
"""
from __future__ import annotations

import json
import re

import pytest

from record_gpu_rig import (
    NVCC_APPS,
    POOL_FLAGS,
    UNFLAGGED,
    Recorded,
    app_path,
    assert_replays,
    binary_globals,
    binary_kernels,
    read_meta,
    record,
    replay,
)
from running import run_kir

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")
msgpack = pytest.importorskip("msgpack", reason="msgpack not installed (the record reader needs it)")

# --- recordings, one per app and module ----------------------------------------------------------


@pytest.fixture(scope="module")
def recordings(gpu, built, tmp_path_factory):
    made: dict[tuple, Recorded] = {}

    def get(name: str, *options: str) -> Recorded:
        key = (name, options)
        if key not in made:
            made[key] = record(tmp_path_factory, app_path(built, name), *options)
        return made[key]
    return get


# --- every program -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NVCC_APPS)
def test_records_every_kernel_and_replays_bit_exact(recordings, name):
    """Output passes through; the records name exactly the binary's kernels (all
    of them are launched); each replays verified from cubin and from PTX."""
    rec = recordings(name)
    kernels = binary_kernels(rec.app)
    assert kernels and rec.kernels() == kernels
    for r in rec.records:
        meta = rec.meta[r["file"]]
        assert meta["kernel"]["name"] == r["kernel"] and meta["launch"]["launch_identity"] == r["launch_identity"]
        assert meta["device"]["arch"] == "sm_90"
        assert meta["kernel"]["image"]["kind"] == "cubin" and meta["kernel"]["ptx"] is not None
        assert len(meta["launch"]["args"]) == len(meta["kernel"]["params"])
        assert r["prologue_bytes"] > 0
        flags = set(r["flags"])
        if name in UNFLAGGED:
            assert not flags, f"{r['demangled']}: {meta['flags']}"
        else:
            assert flags <= POOL_FLAGS, f"{r['demangled']}: {meta['flags']}"
        assert_replays(rec, r)
    assert all(len(rec.of(k)) <= 4 for k in kernels)  # the default --max-per-kernel


def test_vector_add_replay_repeats_and_variants(recordings):
    rec = recordings("rec_vector_add")
    (r,) = rec.records
    path = rec.path(r)
    status, out = replay(path, "--code", "cubin", "--repeat", "5")
    assert status == 0 and out["verified"] and out["repeat"] == 5
    assert len(out["times_ms"]) == 5 and all(t > 0 for t in out["times_ms"]) and out["median_ms"] > 0
    grid, block = r["grid"], r["block"]
    assert block[0] == 256 and grid[0] > 4
    # The kernel loops grid-stride: fewer blocks, or smaller ones, write the same c.
    for option, value in (("--grid", f"{grid[0] // 4},1,1"), ("--block", "128,1,1")):
        status, out = replay(path, "--code", "cubin", option, value)
        assert out["variant"] is True, option
        assert out["launch_identity"] != r["launch_identity"], option
        assert out["verified"] is True and status == 0, (option, out)


def test_jacobi_swapped_pointers_are_distinct_launches(recordings):
    """jacobi_step(u, v) and jacobi_step(v, u), 10 launches each: two records,
    the second's pointer arguments the first's swapped."""
    rec = recordings("rec_jacobi")
    step = [k for k in rec.kernels() if "jacobi_step" in k]
    assert len(step) == 1
    records = rec.of(step[0])
    assert len(records) == 2
    a, b = (rec.meta[r["file"]]["launch"]["args"] for r in records)
    assert a[0] == b[1] and a[1] == b[0] and a[2] == b[2]
    assert [r["grid"][:2] for r in records] == [[16, 16]] * 2 and records[0]["block"] == [16, 16, 1]
    assert sorted(r["ordinal"] for r in records) == [0, 1]


def test_pointer_chase_replays_with_pointers_in_memory(recordings):
    """The kernels dereference device addresses read from device memory: the
    replay is bit-exact only if every allocation is back at its address."""
    rec = recordings("rec_pointer_chase")
    for r in rec.records:
        meta = rec.meta[r["file"]]
        assert meta["va_range"] is not None, "the recording did not get its address range"
        snapshotted = [a for a in meta["allocations"] if a["prologue"] is not None]
        assert all(a["in_va_range"] for a in snapshotted)
        if "sum_tables" in r["kernel"]:
            assert len(snapshotted) >= 8 + 2  # the eight tables, the pointer table, lengths (and more)
        assert_replays(rec, r)


def test_reachable_records_less_and_still_replays(recordings):
    """With --reachable only the allocations an argument reaches (through pointers
    stored in memory, too) are snapshotted: the 4 MiB scratch buffer no kernel
    touches is left out, the list's three node pools are kept."""
    full = recordings("rec_pointer_chase")
    reach = recordings("rec_pointer_chase", "--reachable")
    assert [(r["kernel"], r["launch_identity"]) for r in reach.records] == \
        [(r["kernel"], r["launch_identity"]) for r in full.records]
    for small, big in zip(reach.records, full.records):
        assert small["prologue_bytes"] <= big["prologue_bytes"], small["demangled"]
        scratch = lambda meta: [a for a in meta["allocations"] if a["size"] >= 4 << 20]
        (kept,) = scratch(full.meta[big["file"]])
        (dropped,) = scratch(reach.meta[small["file"]])
        assert kept["prologue"] is not None and dropped["prologue"] is None and dropped["epilogue"] is None
        assert_replays(reach, small)
    assert sum(r["prologue_bytes"] for r in reach.records) < sum(r["prologue_bytes"] for r in full.records)
    # Chunks are shared between records, so compare what the recordings store in all.
    assert reach.listing["chunks"]["bytes"] < full.listing["chunks"]["bytes"]
    walk = [r for r in reach.records if "walk_list" in r["kernel"]]
    (walk_meta,) = [reach.meta[r["file"]] for r in walk]
    pools = [a for a in walk_meta["allocations"] if a["prologue"] is not None and a["size"] % 16 == 0
             and a["size"] >= 16 * 3000]
    assert len(pools) >= 3, "the linked list's node pools (reached only through `next`) were not kept"


def test_device_global_recorded_and_restored(recordings):
    """Both launches of `advance` list the module's globals; the second starts
    from what the first left in `state`; both replay verified (the replay must put
    `state` back as it was before each)."""
    rec = recordings("rec_device_global")
    names = binary_globals(rec.app)
    assert {"state", "coeff"} <= names
    (kernel,) = rec.kernels()
    first, second = sorted(rec.of(kernel), key=lambda r: r["ordinal"])
    assert (first["ordinal"], second["ordinal"]) == (0, 1)
    regions = []
    for r in (first, second):
        meta = rec.meta[r["file"]]
        by_name = {g["name"]: g for g in meta["globals"]}
        assert names <= set(by_name), sorted(by_name)
        assert by_name["state"]["size"] == 4 << 16 and by_name["coeff"]["size"] == 16
        regions.append(by_name["state"])
    before, after = regions
    assert before["prologue"] != before["epilogue"]  # the launch changed the global
    assert after["prologue"] == before["epilogue"]   # the next launch saw that
    coeff = [{g["name"]: g for g in rec.meta[r["file"]]["globals"]}["coeff"] for r in (first, second)]
    assert coeff[0]["prologue"] == coeff[0]["epilogue"] == coeff[1]["prologue"]
    for r in (first, second):
        assert_replays(rec, r)


def test_streams_async_records_each_stream(recordings):
    rec = recordings("rec_streams_async")
    streams = int(re.search(r"streams=(\d+)", rec.bare).group(1))
    for kernel in rec.kernels():
        records = rec.of(kernel)
        launched_on = {rec.meta[r["file"]]["launch"]["stream"] for r in records}
        assert len(records) == streams and len(launched_on) == streams, kernel
        assert all(s not in (0, None) for s in launched_on)  # the app's own streams, not the default one
        for r in records:
            meta = rec.meta[r["file"]]
            assert any(a["kind"] == "device" and a["prologue"] is not None for a in meta["allocations"])


def test_same_kernel_args_one_record_per_distinct_launch(recordings):
    """7 launches of `affine`, 5 of them distinct (arguments, grid, block): 5
    records with --max-per-kernel large enough, 4 by default (the first four
    distinct launches)."""
    unlimited = recordings("rec_same_kernel_args", "--max-per-kernel", "64")
    launches = int(re.search(r"launches=(\d+)", unlimited.bare).group(1))
    distinct = int(re.search(r"distinct=(\d+)", unlimited.bare).group(1))
    assert launches > distinct > 4
    (kernel,) = unlimited.kernels()
    records = unlimited.of(kernel)
    assert len(records) == distinct
    assert len({r["launch_identity"] for r in records}) == distinct
    signature = lambda r: (tuple(unlimited.meta[r["file"]]["launch"]["args"]), tuple(r["grid"]), tuple(r["block"]))
    assert len({signature(r) for r in records}) == distinct
    ordinals = sorted(r["ordinal"] for r in records)
    assert len(set(ordinals)) == distinct and ordinals[-1] < launches
    default = recordings("rec_same_kernel_args")
    assert sorted(r["ordinal"] for r in default.records) == ordinals[:4]
    assert {r["launch_identity"] for r in default.records} <= {r["launch_identity"] for r in records}


def test_clang_ir_recorded_and_replayed_from_ir(recordings):
    """saxpy's record carries the Proteus-embedded module (clang's device IR),
    and replays from the cubin, the PTX and that IR."""
    rec = recordings("rec_clang_ir")
    inspect = run_kir("inspect", "--kernels", "--ir", "--json", "--arch", "sm_90", rec.app)
    report = json.loads(inspect.stdout)
    with_ir = {k["name"] for image in report["images"] if image["kind"] == "cubin"
               for k in image.get("kernels", []) if k["ir_module"] is not None}
    (module,) = report["ir_modules"]
    assert len(with_ir) == 1
    assert rec.kernels() == with_ir  # saxpy is launched; proteus_touch is not
    (r,) = rec.records
    ir = rec.meta[r["file"]]["kernel"]["ir"]
    assert ir is not None and ir["size"] == module["size"]
    assert (rec.out / "chunks" / f"{ir['chunk']}.kirc").is_file()
    assert_replays(rec, r, codes=("cubin", "ptx", "ir"))


def test_python_api_replays_one_record_repeatedly(recordings):
    from kir.record import Recording
    from kir.replay import Replayer

    rec = recordings("rec_vector_add")
    (listed,) = rec.records
    (record,) = Recording(rec.out).records()
    assert record.kernel.name == listed["kernel"]
    assert record.launch.launch_identity == listed["launch_identity"]
    assert len(record.allocations) >= 3 and not record.flags
    with Replayer(record, code="cubin") as replayer:
        for _ in range(3):
            result = replayer.run(repeat=4)
            assert result.verified is True
            assert result.median_ms > 0


def test_only_the_asked_mpi_ranks_record(gpu, built, tmp_path):
    """The rank comes from the launcher's variables; records of a rank carry it
    in their file names, so ranks can share one directory."""
    from kir.record import record_app

    app = app_path(built, "rec_vector_add")
    status, skipped = record_app([app], tmp_path, ranks=[1], env={"OMPI_COMM_WORLD_RANK": "0"})
    assert status == 0 and skipped.records() == []
    status, recorded = record_app([app], tmp_path, ranks=[1], env={"OMPI_COMM_WORLD_RANK": "1"})
    (record,) = recorded.records()
    assert status == 0 and record.path.name.endswith(".rank1.kirrec") and record.process.rank == 1


def test_unavailable_va_range_is_said_and_replays_at_exact_addresses(gpu, built, tmp_path):
    """A range the driver will not place where asked: the recorder says so,
    falls back to the runtime's allocations, flags the records, and replay maps
    each allocation at its own recorded address instead."""
    app = app_path(built, "rec_vector_add")
    result = run_kir("record", "--va-base", "0x1000", "-o", tmp_path, "--", app)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cannot reserve the VA range" in result.stderr
    (path,) = (tmp_path / "records").glob("*.kirrec")
    meta = read_meta(path)
    assert meta["va_range"] is None
    assert [f["flag"] for f in meta["flags"]] == ["outside-va-range"]
    status, report = replay(path)
    assert status == 0 and report["verified"] is True
