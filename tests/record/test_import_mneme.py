"""`kir import-mneme`: Mneme recordings, written here byte for byte as Mneme's
recorder writes them (Olympus-HPC/Mneme 4442a49, functions cited at each writer
below), around the IR of a real CUDA kernel built with clang-22 at test time, are
converted into kir records that `kir records` lists, `kir replay --plan --code ir`
plans, and that hold exactly the generator's bytes. Malformed recordings give exit 2
and an error naming the file and the byte offset."""
from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import xxhash
from hypothesis import strategies as st

import build as fixture_build
import damage
from test_fuzz_records import mutate  # the records' fuzzer's mutations, with its u64 op
import kir._core as core
from kir.record import Record, Recording

KERNEL_SOURCE = (Path(__file__).parent / "fixtures" / "mneme_affine.cu").read_text()
KERNEL = "_Z6affinePiPKi6Affinexi"
VA_BASE = 0x153940000000  # DeviceTraits<CUDA>::getSuggestedAddr (include/mneme/DeviceTraits.hpp)
VA_SIZE = 4 << 30
PAGE = 2 << 20
GLOBAL_ADDR = 0x7F3A00001000
DIFF_CHUNK = 1 << 20  # MnemeSnapshot::DiffChunkSize


# --- the generator: Mneme's writers, in Python ---------------------------------------

def u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


@dataclass
class Meta:  # mneme::Metadata (include/mneme/MnemeAnnotation.hpp), defaults as recorded
    builtin: int = 0
    threshold: float = 0.0
    threshold_kind: int = 0
    norm: int = 0
    tag: bytes = b""

    def serialize(self) -> bytes:  # metadata::serialize (src/MnemeAnnotationInternal.cpp)
        return (bytes([self.builtin]) + struct.pack("<d", self.threshold) + bytes([self.threshold_kind, self.norm])
                + u64(len(self.tag)) + self.tag)


@dataclass
class Blob:
    address: int
    data: bytes
    meta: Meta = field(default_factory=Meta)

    @property
    def reserved(self) -> int:  # PageManager::allocateAddr rounds to its page size
        return (len(self.data) + PAGE - 1) // PAGE * PAGE


def bytes_snapshot(globals_: list[tuple[str, int, bytes]], blobs: list[Blob], args: list[bytes]) -> bytes:
    """MnemeSnapshot::takeMnemeBytesSnapshot (include/mneme/MnemeSnapshot.hpp), each blob
    through operator<<(raw_ostream&, const MnemeMemoryBlob&) (include/mneme/MnemeMemory.hpp)."""
    out = bytearray(u64(len(globals_)))
    for name, address, data in globals_:
        out += u64(len(name)) + name.encode() + u64(len(data)) + u64(address) + data
    out += u64(len(blobs))
    for b in blobs:
        out += u64(b.reserved) + u64(len(b.data)) + u64(b.address) + b.data + b.meta.serialize()
    out += u64(len(args))
    for a in args:
        out += u64(len(a)) + a
    return bytes(out)


def changed_ranges(base: bytes, current: bytes, base_offset: int) -> list[bytes]:
    """MnemeSnapshot::writeChangedRanges: each maximal run of differing bytes."""
    ranges, i = [], 0
    while i < len(base):
        while i < len(base) and base[i] == current[i]:
            i += 1
        if i == len(base):
            break
        start = i
        while i < len(base) and base[i] != current[i]:
            i += 1
        ranges.append(u64(base_offset + start) + u64(i - start) + current[start:i])
    return ranges


def diff_snapshot(globals_: list[tuple[str, int, bytes, bytes]], blobs: list[tuple[Blob, bytes]]) -> bytes:
    """MnemeSnapshot::writeMnemeDiffSnapshot: globals diffed whole, blobs per 1 MiB chunk
    (writeCountAndWriteChangedRanges), so a run across a chunk boundary is two ranges."""
    out = bytearray(b"MNEME_DIFF_V1" + u64(len(globals_)))
    for name, address, base, current in globals_:
        ranges = changed_ranges(base, current, 0)
        out += u64(len(name)) + name.encode() + u64(len(base)) + u64(address) + u64(len(ranges)) + b"".join(ranges)
    out += u64(len(blobs))
    for blob, current in blobs:
        out += u64(blob.reserved) + u64(len(blob.data)) + u64(blob.address) + blob.meta.serialize()
        ranges = []
        for offset in range(0, len(blob.data), DIFF_CHUNK):
            ranges += changed_ranges(blob.data[offset:offset + DIFF_CHUNK], current[offset:offset + DIFF_CHUNK], offset)
        out += u64(len(ranges)) + b"".join(ranges)
    return bytes(out)


def dynamic_hash(grid, block, shared: int) -> int:
    """KernelInstancesCollection::computeHash: llvm::stable_hash_combine (LLVM >= 20:
    xxh3_64 over the values' bytes) of grid, of block, then of both and shared memory."""
    combine = lambda *v: xxhash.xxh3_64_intdigest(b"".join(u64(x) for x in v))  # noqa: E731
    return combine(combine(*grid), combine(*block), shared)


def database(static: int, name: str, demangled: str, instances: dict) -> str:
    """KernelInstancesCollection::toJSON, printed by llvm::json (compact, keys sorted)."""
    doc = {"StaticHash": static, "VAddr": f"0x{VA_BASE:016x}", "VASize": VA_SIZE, "KernelName": name,
           "DemangledName": demangled, "Modules": [f"RecordedIR_{static}.bc"], "BinaryBlobs": [],
           "ArgNames": ["out", "in", "a", "bias", "n"], "Specializations": [False, False, False, True, True],
           "instances": instances}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def instance_json(grid, block, shared, prologue, epilogue) -> dict:  # KernelInstance::toJSON
    dims = lambda d: {"x": d[0], "y": d[1], "z": d[2]}  # noqa: E731
    return {"Prologue": prologue, "Epilogue": epilogue, "BlockDims": dims(block), "GridDims": dims(grid),
            "SharedMem": shared, "Args": [], "Occurrences": 1}


# --- a recording of the affine kernel ------------------------------------------------

@dataclass
class Launch:
    grid: tuple
    block: tuple
    dynamic: int
    args: list[bytes]
    prologue: dict          # region name -> bytes ("in", "out", "launched")
    epilogue: dict
    prologue_file: str
    epilogue_file: str


def ints(values) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def run_affine(n: int, mul: int, add: int, bias: int, seed: int, counter: int):
    """The inputs, and the outputs the kernel computes (the oracle, in Python)."""
    inp = [((i * 2654435761 + seed) % 20001) - 10000 for i in range(n)]
    out_before = [(-1 - i) for i in range(n)]
    wrap = lambda x: (x + 2**31) % 2**32 - 2**31  # noqa: E731  (int arithmetic wraps on the GPU)
    out_after = [wrap(x * mul + add + bias) for x in inp]
    return ints(inp), ints(out_before), ints(out_after), u64(counter), u64(counter + n)


def write_recording(folder: Path, ir: bytes, static: int = 15941914485064662553,
                    sizes: tuple[int, int] = (300_000, 5000)) -> list[Launch]:
    """Two instances of `affine` (grid/block differ, `sizes` elements): the first with a
    diff epilogue (Mneme's default), the second with a bytes epilogue
    (--epilogue-format bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"RecordedIR_{static}.bc").write_bytes(ir)  # StoreModuleBytes
    in_addr, out_addr = VA_BASE, VA_BASE + 2 * PAGE
    launches, instances = [], {}
    for k, (n, block, epilogue_format) in enumerate([(sizes[0], 256, "diff"), (sizes[1], 128, "bytes")]):
        grid = (math.ceil(n / block), 1, 1)
        block = (block, 1, 1)
        inp, out0, out1, c0, c1 = run_affine(n, 3, -7, 11, seed=k, counter=100 * k)
        args = [u64(out_addr), u64(in_addr), ints([3, -7]), struct.pack("<q", 11), ints([n])]
        dyn = dynamic_hash(grid, block, 0)
        pro = f"DeviceState.prologue.{static}.{dyn}.mneme"
        epi = f"DeviceState.epilogue.{static}.{dyn}.mneme"
        blobs = [Blob(in_addr, inp), Blob(out_addr, out0)]
        (folder / pro).write_bytes(bytes_snapshot([("launched", GLOBAL_ADDR, c0)], blobs, args))
        if epilogue_format == "diff":
            data = diff_snapshot([("launched", GLOBAL_ADDR, c0, c1)], [(blobs[0], inp), (blobs[1], out1)])
        else:
            data = bytes_snapshot([("launched", GLOBAL_ADDR, c1)], [Blob(in_addr, inp), Blob(out_addr, out1)], args)
        (folder / epi).write_bytes(data)
        instances[str(dyn)] = instance_json(grid, block, 0, pro, epi)
        launches.append(Launch(grid, block, dyn, args, {"in": inp, "out": out0, "launched": c0},
                               {"in": inp, "out": out1, "launched": c1}, pro, epi))
    (folder / f"{static}.json").write_text(database(static, KERNEL, "affine(int*, int const*, Affine, long long, int)",
                                                    instances))
    return launches


@pytest.fixture(scope="module")
def kernel_ir(built) -> bytes:
    """affine's device IR by clang-22 (tests/fixtures/mneme_affine.cu, built by build.py:
    a GPU machine without clang takes it from the fixture cache)."""
    if "mneme_affine.bc" not in built:
        pytest.skip("clang-22 is not installed")
    return Path(built["mneme_affine.bc"]).read_bytes()


@pytest.fixture
def recording(tmp_path, kernel_ir):
    launches = write_recording(tmp_path / "mneme", kernel_ir)
    return tmp_path / "mneme", launches


# --- conversion ----------------------------------------------------------------------

def test_import_lists_plans_and_round_trips(recording, kernel_ir, tmp_path, kir_cli):
    src, launches = recording
    out = tmp_path / "kir"
    result = kir_cli("import-mneme", src, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "2 record(s) written" in result.stdout

    listed = kir_cli("records", out, "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["records"]) == 2

    records = {tuple(r.launch.grid): r for r in Recording(out).records()}
    assert len(records) == 2
    static = str(core.static_hash(KERNEL, "ir", [kernel_ir]))
    for launch in launches:
        record = records[launch.grid]
        assert record.kernel.name == KERNEL
        assert record.kernel.static_hash == static  # kir's hash over the IR, code kind "ir"
        assert record.code("ir") == kernel_ir
        assert record.kernel.image is None
        assert [bytes(a) for a in record.launch.args] == launch.args
        assert tuple(record.launch.block) == launch.block
        # the parameter layout: pointers 8, the struct 8 (align 4), the long long 8, the int 4
        assert [(p.offset, p.size) for p in record.kernel.params] == [(0, 8), (8, 8), (16, 8), (24, 8), (32, 4)]
        assert (record.va_range.base, record.va_range.size) == (VA_BASE, VA_SIZE)
        by_address = {r.address: r for r in record.allocations}
        assert set(by_address) == {VA_BASE, VA_BASE + 2 * PAGE}
        assert all(r.in_va_range and r.kind == "device" for r in record.allocations)
        for name, address in (("in", VA_BASE), ("out", VA_BASE + 2 * PAGE)):
            assert record.prologue(by_address[address]) == launch.prologue[name]
            assert record.epilogue(by_address[address]) == launch.epilogue[name]
        (g,) = record.globals
        assert (g.name, g.address) == ("launched", GLOBAL_ADDR)
        assert record.prologue(g) == launch.prologue["launched"]
        assert record.epilogue(g) == launch.epilogue["launched"]
        assert record.flags == []

        plan = kir_cli("replay", record.path, "--plan", "--code", "ir", "--json")
        assert plan.returncode == 0, plan.stderr
        assert "do not match" not in plan.stderr
        doc = json.loads(plan.stdout)
        assert doc["code"]["kind"] == "ir"
        launched = kir_cli("replay", record.path, "--plan")  # "launched" is the IR for an IR-only record
        assert launched.returncode == 0, launched.stderr
        cubin = kir_cli("replay", record.path, "--plan", "--code", "cubin")
        assert cubin.returncode == 2 and "use --code ir" in cubin.stderr


def test_the_launch_identity_is_kirs(recording, tmp_path):
    """The record's launch identity is kir's (docs/hashing.md), not Mneme's dynamic hash."""
    from kir.mneme import convert
    from kir.replay.planner import recompute_hashes
    src, launches = recording
    done = convert(src, tmp_path / "kir")
    assert sorted(int(d.mneme_dynamic) for d in done) == sorted(launch.dynamic for launch in launches)
    for d in done:
        record = Record.load(d.record)
        assert recompute_hashes(record).match


def test_check_writes_nothing(recording, tmp_path, kir_cli):
    src, _ = recording
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir", "--check")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "kir").exists()


# --- malformed recordings ------------------------------------------------------------

def fails(kir_cli, src: Path, out: Path, *expected: str) -> str:
    result = kir_cli("import-mneme", src, "-o", out)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert not (out / "records").exists() or not list((out / "records").iterdir())  # nothing written
    return result.stderr


def test_truncated_prologue(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[1].prologue_file
    data = path.read_bytes()
    # cut inside the second blob's bytes: globals (8 + 8+8+8+8+8) then blob count (8), blob 1
    blob2_data = 8 + (8 + 8 + 8 + 8 + 8) + 8 + (24 + 20000 + 19) + 24
    path.write_bytes(data[:blob2_data + 100])
    fails(kir_cli, src, tmp_path / "kir", f"{path}: byte {blob2_data}: truncated: blob #1 at",
          "needs 20000 bytes, 100 remain")


def test_truncated_diff_epilogue(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[0].epilogue_file
    path.write_bytes(path.read_bytes()[:-3])
    fails(kir_cli, src, tmp_path / "kir", str(path), "truncated")


def test_diff_range_past_the_end(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[0].epilogue_file
    data = bytearray(path.read_bytes())
    at = 13 + 8 + 8 + len("launched") + 8 + 8 + 8  # the global's first range's offset
    data[at:at + 8] = u64(6)  # 6 + its length > the global's 8 bytes
    path.write_bytes(bytes(data))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: byte {at}: global 'launched': range #0", "runs past its 8 bytes")


def test_json_missing_field(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    key = next(iter(doc["instances"]))
    del doc["instances"][key]["GridDims"]
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: instances['{key}']: missing field 'GridDims'")


def test_json_wrong_type_and_missing_va(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    doc["VASize"] = "4GiB"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: VASize: expected int, found str")
    del doc["VAddr"]
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: missing field 'VAddr'")


def test_wrong_argument_size(recording, tmp_path, kir_cli, kernel_ir):
    """An argument whose recorded size is not the IR parameter's (the 8-byte long long as 4)."""
    src, launches = recording
    launch = launches[1]
    path = src / launch.prologue_file
    bad = launch.args[:3] + [ints([11])] + launch.args[4:]
    snap = bytes_snapshot([("launched", GLOBAL_ADDR, launch.prologue["launched"])],
                          [Blob(VA_BASE, launch.prologue["in"]), Blob(VA_BASE + 2 * PAGE, launch.prologue["out"])], bad)
    path.write_bytes(snap)
    fails(kir_cli, src, tmp_path / "kir", f"{path}: argument 4 (bias) is 4 bytes, the kernel's parameter is 8")


def test_blob_size_mismatch_between_prologue_and_epilogue(recording, tmp_path, kir_cli):
    src, launches = recording
    launch = launches[1]  # the bytes epilogue
    path = src / launch.epilogue_file
    path.write_bytes(bytes_snapshot([("launched", GLOBAL_ADDR, launch.epilogue["launched"])],
                                    [Blob(VA_BASE, launch.epilogue["in"][:-4]),
                                     Blob(VA_BASE + 2 * PAGE, launch.epilogue["out"])], launch.args))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: the blob at {VA_BASE:#x} is missing or differs in size")


def test_missing_files_and_folders(recording, tmp_path, kir_cli):
    src, launches = recording
    fails(kir_cli, tmp_path / "nowhere", tmp_path / "kir", "not a directory")
    (src / launches[0].epilogue_file).unlink()
    fails(kir_cli, src, tmp_path / "kir", f"{src / launches[0].epilogue_file}: missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(kir_cli, empty, tmp_path / "kir", "no Mneme recording here")


def test_file_names_stay_in_the_folder(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    key = next(iter(doc["instances"]))
    doc["instances"][key]["Prologue"] = "../../etc/passwd"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", "is not a file name in the recording's folder")


def test_ir_without_the_kernel(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    doc["KernelName"] = "_Z7missingv"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", "does not define the kernel _Z7missingv")


def test_ir_that_crashes_llvm_is_an_error(kernel_ir, tmp_path, kir_cli):
    """RecordedIR_*.bc a mutant of the real module (tests/damage.py) that crashes
    llvmlite's LLVM: kir reads it in its worker, exit 2 with one line naming the file
    (issue 21 §9)."""
    crasher = damage.first_crasher(damage.mutants(kernel_ir, 21, 200), tmp_path)
    write_recording(tmp_path / "mneme", crasher)
    error = fails(kir_cli, tmp_path / "mneme", tmp_path / "kir", "RecordedIR_", " crashed (SIG", "reading this module")
    assert error.startswith("kir: error: ") and error.count("\n") == 1, error


def test_annotated_blob_warns(recording, tmp_path, kir_cli):
    """A blob annotated with a tolerance (mneme::annotate) converts, with a warning:
    kir records carry no per-buffer tolerance."""
    src, launches = recording
    launch = launches[1]
    meta = Meta(builtin=5, threshold=1e-3, threshold_kind=1, norm=2, tag=b"out")
    (src / launch.epilogue_file).write_bytes(bytes_snapshot(
        [("launched", GLOBAL_ADDR, launch.epilogue["launched"])],
        [Blob(VA_BASE, launch.epilogue["in"]), Blob(VA_BASE + 2 * PAGE, launch.epilogue["out"], meta)], launch.args))
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir")
    assert result.returncode == 0, result.stderr
    assert f"the blob at {VA_BASE + 2 * PAGE:#x} carries a Mneme tolerance (threshold 0.001, norm 2)" in result.stderr


# --- on the GPU ----------------------------------------------------------------------

def test_replay_imported_record_from_ir(gpu, recording, tmp_path, kir_cli):
    """An imported record replays from its IR and its output matches the epilogue the
    generator computed (the oracle: the kernel's arithmetic in Python)."""
    src, _ = recording
    out = tmp_path / "kir"
    assert kir_cli("import-mneme", src, "-o", out).returncode == 0
    for record in Recording(out).records():
        result = kir_cli("replay", record.path, "--code", "ir")
        assert result.returncode == 0, (result.stdout, result.stderr)


def test_json_output(recording, tmp_path, kir_cli):
    src, launches = recording
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["format"] == "kir.import-mneme/1"
    assert sorted(r["mneme_dynamic_hash"] for r in doc["records"]) == sorted(str(x.dynamic) for x in launches)
    assert all(r["mneme_static_hash"] == 15941914485064662553 and Path(r["record"]).is_file() and r["regions"] == 3
               for r in doc["records"])


# --- fuzzing the reader (issue 21 §18) -------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("KIR_FUZZ_MNEME_EXAMPLES", "300"))

MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(b"")),
    # a length, count, size or address field (Mneme's are u64s): set to an extreme
    st.tuples(st.just("u64"), st.integers(0, 1 << 16),
              st.sampled_from([0, 1, 7, 0xFFFF, 0xFFFFFFFF, 1 << 40, (1 << 63) - 1, (1 << 64) - 1])),
)


def test_damaged_recordings_raise_only_mneme_errors(kernel_ir, tmp_path):
    """A small recording (both epilogue formats), one of its files — the JSON, a
    prologue, a diff or a bytes epilogue — mutated at random (fixed seed, a bounded
    number of examples; KIR_FUZZ_MNEME_EXAMPLES raises it), then checked as `kir
    import-mneme --check` does: a conversion or a KirError naming the file, never
    another exception."""
    from hypothesis import HealthCheck, given, settings

    from kir.errors import KirError
    from kir.mneme import convert
    source = tmp_path / "mneme"
    write_recording(source, kernel_ir, sizes=(600, 40))
    files = sorted(p.name for p in source.iterdir() if not p.name.endswith(".bc"))
    assert len(files) == 5 and len(convert(source, tmp_path / "out", write=False)) == 2
    outcomes = {"read": 0, "refused": 0}

    @settings(max_examples=FUZZ_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(target=st.sampled_from(files), mutations=st.lists(MUTATION, min_size=1, max_size=6))
    def damaged(target, mutations):
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "mneme"
            shutil.copytree(source, copy)
            (copy / target).write_bytes(mutate((source / target).read_bytes(), mutations, []))
            try:
                convert(copy, Path(scratch) / "out", write=False)
                outcomes["read"] += 1
            except KirError as error:
                assert str(copy) in str(error), error  # names the file
                outcomes["refused"] += 1

    damaged()
    assert outcomes["refused"] > FUZZ_EXAMPLES // 2 and outcomes["read"] > 0, outcomes
