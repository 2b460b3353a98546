"""Kernel-launch records (docs/record-format.md), without a GPU: records written by
the C++ writer (kir._core.RecordBuilder, the code the in-app recorder runs) read
back by kir.record; damaged files rejected with messages naming file and chunk;
`kir records`; the replay plan (`kir replay --plan`) on a real cubin, with the
kernel hashes recomputed; LLVM IR compiled to PTX with llvmlite; `kir record`'s
environment."""
from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path

import msgpack
import pytest

import hash_reference as ref
import kir
import kir.jit
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir import _core, replay
from kir.jit import libdevice
from kir.record import CHUNK_HEADER, FORMAT, RECORD_HEADER, Record, RecordError, Recording
from record_builders import AXPY, BASE, CS, as_version_1, axpy_record, h128, rewrite_body

needs_builder = pytest.mark.skipif(not hasattr(_core, "RecordBuilder"),
                                   reason="kir._core.RecordBuilder is not in this build")
pytestmark = needs_builder


def builder(directory, chunk_size=CS, **kernel):  # kernel: rank, identity (launch identity), arg
    """A builder with a kernel, an image and a launch set: enough for a record."""
    b = _core.RecordBuilder(str(directory), chunk_size)
    static = _core.static_hash("k", "cubin", [b"image"])
    b.set_process(1234, kernel.get("rank", -1))
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel("k", "k(int*)", static, [0], [8])
    b.set_image("cubin", "sm_90", b"image")
    b.set_launch("cudaLaunchKernel", kernel.get("identity", static), (2, 1, 1), (128, 1, 1), 0, 0,
                 [kernel.get("arg", struct.pack("<Q", BASE))], 0)
    return b


def one_region(tmp_path, before: bytes, after: bytes, **kernel) -> Record:
    b = builder(tmp_path, **kernel)
    b.set_va_range(BASE, 1 << 30)
    region = b.add_allocation(BASE, len(before), "device", True)
    b.snapshot(region, False, before)
    b.snapshot(region, True, after)
    return Record.load(b.write())


# --- round trip ---------------------------------------------------------------------

def test_every_field_round_trips(tmp_path):
    rng = random.Random(7)
    sizes = [0, 1, CS - 1, CS, CS + 1, 3 * CS + 5, 5 * CS]
    data = [(rng.randbytes(n), rng.randbytes(n)) for n in sizes]
    static = _core.static_hash("_Z1kPfi", "cubin", [b"\x7fELF-image"])
    args = [b"12345678", b"\x05\0\0\0"]
    identity = ref.launch_identity(str(static), "sm_90", args, [3, 2, 1], [64, 4, 2], 1024)
    dynamic_v1 = ref.dynamic_hash(str(static), "sm_90", args=[(i + 1, "bytes", a) for i, a in enumerate(args)],
                                  grid=[3, 2, 1], block=[64, 4, 2])
    b = _core.RecordBuilder(str(tmp_path), CS)
    b.set_process(4321, 3)
    b.set_device("NVIDIA H200", "sm_90", 1)
    b.set_kernel("_Z1kPfi", "k(float*, int)", static, [0, 8], [8, 4])
    b.set_image("cubin", "sm_90", b"\x7fELF-image")
    b.set_ptx("sm_90", b".version 8.0\n.target sm_90\n")
    b.set_ir(b"BC\xc0\xde-module")
    b.set_launch("cuLaunchKernel", h128(identity), (3, 2, 1), (64, 4, 2), 1024, 0xABCD, args, 17)
    b.set_va_range(BASE, 1 << 34)
    offsets = [sum(sizes[:i]) + 4096 * i for i in range(len(sizes))]
    indices = [b.add_allocation(BASE + o, n, "device", True) for o, n in zip(offsets, sizes)]
    b.add_allocation(0x10000, 64, "host-pinned", False)
    glob = b.add_global("table", 0xDEAD0000, 256)
    for i, (before, after) in zip(indices, data):
        b.snapshot(i, False, before)
        b.snapshot(i, True, after)
    b.snapshot(glob, False, bytes(range(256)))
    b.snapshot(glob, True, bytes(reversed(range(256))))
    b.add_flag("host-pointer", "argument 3 points into pinned host memory")
    b.add_flag("global-pointer", "argument 4")
    path = Path(b.write())

    assert path == tmp_path / "records" / f"{static}.{identity}.rank3.kirrec"
    r = Record.load(path)
    assert (r.version, r.kir_version, r.chunk_size) == (FORMAT["version"], kir.__version__, CS)
    assert (r.process.pid, r.process.rank) == (4321, 3)
    assert (r.device.name, r.device.arch, r.device.ordinal) == ("NVIDIA H200", "sm_90", 1)
    k = r.kernel
    assert (k.name, k.demangled, k.static_hash) == ("_Z1kPfi", "k(float*, int)", str(static))
    assert [(p.offset, p.size) for p in k.params] == [(0, 8), (8, 4)]
    assert (k.image.kind, k.image.arch, k.image.size) == ("cubin", "sm_90", len(b"\x7fELF-image"))
    assert r.code("image") == b"\x7fELF-image"
    assert r.code("ptx") == b".version 8.0\n.target sm_90\n" and k.ptx.arch == "sm_90"
    assert r.code("ir") == b"BC\xc0\xde-module"
    launch = r.launch
    assert (launch.api, launch.launch_identity, launch.grid, launch.block) == \
        ("cuLaunchKernel", identity, (3, 2, 1), (64, 4, 2))
    # format 1's dynamic hash is version 1's alone (tests/record/test_record_versions.py reads one)
    assert launch.dynamic_hash is None and dynamic_v1 != identity and launch.identity == identity
    assert (launch.shared_bytes, launch.stream, launch.ordinal) == (1024, 0xABCD, 17)
    assert launch.args == [b"12345678", b"\x05\0\0\0"]
    assert (r.va_range.base, r.va_range.size) == (BASE, 1 << 34)
    assert [(a.address, a.size, a.kind, a.in_va_range) for a in r.allocations] == \
        [(BASE + o, n, "device", True) for o, n in zip(offsets, sizes)] + [(0x10000, 64, "host-pinned", False)]
    for region, (before, after) in zip(r.allocations, data):
        assert len(region.prologue) == -(-region.size // CS)
        assert r.prologue(region) == before and r.epilogue(region) == after
    assert r.allocations[-1].prologue is None and r.allocations[-1].epilogue is None
    [g] = r.globals
    assert (g.name, g.address, g.size, g.is_global) == ("table", 0xDEAD0000, 256, True)
    assert r.prologue("table") == bytes(range(256)) and r.epilogue(g.index) == bytes(reversed(range(256)))
    assert [(f.flag, f.detail) for f in r.flags] == [
        ("host-pointer", "argument 3 points into pinned host memory"), ("global-pointer", "argument 4")]
    assert r.stats.prologue_bytes == r.stats.epilogue_bytes == sum(sizes) + 256
    assert r.stats.stored_bytes == b.stored_bytes == sum(p.stat().st_size for p in Recording(tmp_path).chunk_paths)
    r.check()  # every chunk reads back


def test_region_not_snapshotted(tmp_path):
    b = builder(tmp_path)
    b.add_allocation(0x5000, 100, "managed", False)
    r = Record.load(b.write())
    assert not r.allocations[0].snapshotted and r.va_range is None
    with pytest.raises(RecordError, match=r"managed allocation at 0x5000 was not snapshotted"):
        r.prologue(0)


def test_chunks_are_stored_raw_or_with_zstd(tmp_path):
    rng = random.Random(1)
    noise, zeros = rng.randbytes(3 * CS), bytes(3 * CS)
    r = one_region(tmp_path, noise, zeros)
    codecs = {}
    for name in r.allocations[0].prologue + r.allocations[0].epilogue:
        header = CHUNK_HEADER.unpack_from(r.chunk_path(name).read_bytes())
        codecs[name] = header[2]
    assert {codecs[n] for n in r.allocations[0].prologue} == {0}       # noise does not shrink: raw
    assert {codecs[n] for n in r.allocations[0].epilogue} == {1}       # zeros: zstd
    assert r.prologue(0) == noise and r.epilogue(0) == zeros


# --- deduplication and changed parts ----------------------------------------------------

def test_identical_chunks_are_stored_once(tmp_path):
    rng = random.Random(2)
    shared = rng.randbytes(2 * CS + 10)
    b = builder(tmp_path)
    first, second = b.add_allocation(BASE, len(shared), "device", True), \
        b.add_allocation(BASE + (1 << 21), len(shared), "device", True)
    for region in (first, second):
        b.snapshot(region, False, shared)
        b.snapshot(region, True, shared)
    r = Record.load(b.write())
    assert r.allocations[0].prologue == r.allocations[1].prologue == r.allocations[0].epilogue
    chunks = Recording(tmp_path).chunk_paths
    assert len(chunks) == 3 + 1  # the region's three chunks, and the image

    # A second record with the same memory adds no chunk.
    other = one_region(tmp_path, shared, shared, arg=struct.pack("<Q", BASE + 8),
                       identity=h128("0" * 31 + "1"))
    assert Recording(tmp_path).chunk_paths == chunks
    assert other.allocations[0].prologue == r.allocations[0].prologue
    assert len(Recording(tmp_path)) == 2


def test_changed_ranges_are_the_chunks_that_differ(tmp_path):
    rng = random.Random(3)
    before = rng.randbytes(5 * CS + 100)
    after = bytearray(before)
    for offset in (CS + 17, 2 * CS, 5 * CS + 99):   # chunks 1 and 2 (merged), and the last
        after[offset] ^= 0xFF
    r = one_region(tmp_path, before, bytes(after))
    region = r.allocations[0]
    same = [i for i, (x, y) in enumerate(zip(region.prologue, region.epilogue)) if x == y]
    assert same == [0, 3, 4]
    assert r.changed_ranges(region) == [(CS, 2 * CS), (5 * CS, 100)]
    assert r.epilogue(region) == bytes(after)


def test_no_changed_ranges_when_nothing_changed(tmp_path):
    data = random.Random(4).randbytes(CS * 2)
    r = one_region(tmp_path, data, data)
    assert r.changed_ranges(0) == []


# --- damaged files ----------------------------------------------------------------------

@pytest.fixture
def damaged(tmp_path):
    """A record with one raw chunk and one zstd chunk to damage: (record, raw name, zstd name)."""
    rng = random.Random(5)
    r = one_region(tmp_path, rng.randbytes(CS), bytes(CS))
    return r, r.allocations[0].prologue[0], r.allocations[0].epilogue[0]


def patch(path: Path, offset: int, data: bytes) -> None:
    content = bytearray(path.read_bytes())
    content[offset:offset + len(data)] = data
    path.write_bytes(bytes(content))


def flip(path: Path, offset: int) -> None:
    patch(path, offset, bytes([path.read_bytes()[offset] ^ 0x01]))


def expect(record: Record, name: str, *pieces: str) -> str:
    with pytest.raises(RecordError) as error:
        record.chunk(name)
    message = str(error.value)
    assert message.startswith(f"{record.chunk_path(name)}: chunk {name}: "), message
    for piece in pieces:
        assert piece in message, message
    return message


def test_flipped_payload_byte_of_a_raw_chunk(damaged):
    r, raw, _ = damaged
    flip(r.chunk_path(raw), CHUNK_HEADER.size + 100)
    message = expect(r, raw, "hash of the decoded bytes is ", f", not {raw}")
    with pytest.raises(RecordError, match=raw):
        r.prologue(0)
    assert "hash of the decoded bytes" in message


def test_flipped_payload_byte_of_a_zstd_chunk(damaged):
    r, _, packed = damaged
    size = r.chunk_path(packed).stat().st_size
    flip(r.chunk_path(packed), (CHUNK_HEADER.size + size) // 2)
    expect(r, packed)  # either zstd rejects the frame or the hash differs: the chunk is named


@pytest.mark.parametrize("offset,data,pieces", [
    (0, b"KIRCHUNX", ["byte 0: not a kir chunk", "KIRCHUNX"]),
    (8, struct.pack("<I", FORMAT["version"] + 1), [f"byte 8: format version {FORMAT['version'] + 1} is not supported"]),
    (12, struct.pack("<I", 7), ["byte 12: unknown codec 7"]),
    (16, struct.pack("<Q", CS - 1), [f"decoded {CS} bytes, header (byte 16) says {CS - 1}"]),
    (16, struct.pack("<Q", CS + 1), [f"byte 16: raw size {CS + 1} is more than the {CS} bytes this chunk can hold"]),
    (24, struct.pack("<Q", CS + 5), ["truncated: ", f"header says {CHUNK_HEADER.size + CS + 5}"]),
    (32, b"\0" * 8, ["byte 32: header says hash 0000000000000000", "the file name says"]),
])
def test_damaged_chunk_header(damaged, offset, data, pieces):
    r, raw, _ = damaged
    patch(r.chunk_path(raw), offset, data)
    expect(r, raw, *pieces)


def test_truncated_and_extended_chunks(damaged):
    r, raw, packed = damaged
    path = r.chunk_path(raw)
    content = path.read_bytes()
    path.write_bytes(content[:-10])
    expect(r, raw, f"truncated: {len(content) - 10} bytes, header says {len(content)}")
    path.write_bytes(content + b"xx")
    expect(r, raw, f"2 bytes of trailing data: {len(content) + 2} bytes, header says {len(content)}")
    path.write_bytes(content[:20])
    expect(r, raw, f"truncated: 20 bytes, a chunk header is {CHUNK_HEADER.size}")


def test_chunk_under_the_wrong_name(damaged):
    r, raw, packed = damaged
    shutil.copyfile(r.chunk_path(raw), r.chunk_path(packed))
    expect(r, packed, f"header says hash {raw}, the file name says {packed}")


def test_missing_chunk(damaged):
    r, raw, _ = damaged
    r.chunk_path(raw).unlink()
    expect(r, raw, "missing")
    with pytest.raises(RecordError, match=f"chunk {raw}: missing"):
        r.check()


def record_error(path: Path) -> str:
    with pytest.raises(RecordError) as error:
        Record.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: "), message
    return message


def test_damaged_records(damaged):
    r = damaged[0]
    content = r.path.read_bytes()
    flip(r.path, len(content) - 3)
    assert "checksum of the body is " in record_error(r.path)
    r.path.write_bytes(content[:-7])
    assert f"truncated: {len(content) - 7} bytes, header says {len(content)}" in record_error(r.path)
    r.path.write_bytes(content[:RECORD_HEADER.size - 1])
    assert "a record header is 40" in record_error(r.path)
    r.path.write_bytes(content[:8] + struct.pack("<I", 9) + content[12:])
    assert "format version 9 is not supported" in record_error(r.path)
    r.path.write_bytes(b"KIRCHUNK" + content[8:])
    assert "not a kir record" in record_error(r.path)


def test_record_bodies_that_are_not_records(damaged):
    r = damaged[0]
    meta = msgpack.unpackb(r.path.read_bytes()[RECORD_HEADER.size:])
    rewrite_body(r.path, b"\xc1\xc1 not msgpack")
    assert "byte 40: the body is not a msgpack value" in record_error(r.path)
    rewrite_body(r.path, msgpack.packb([1, 2]))
    assert "the body is a msgpack list, not a map" in record_error(r.path)
    rewrite_body(r.path, msgpack.packb({**meta, "version": FORMAT["version"] + 1}))
    assert f"metadata 'version' is {FORMAT['version'] + 1}" in record_error(r.path)
    rewrite_body(r.path, msgpack.packb({k: v for k, v in meta.items() if k != "launch"}))
    assert "metadata has no 'launch'" in record_error(r.path)
    meta["kernel"]["params"][0]["size"] = "8"
    rewrite_body(r.path, msgpack.packb(meta))
    assert "metadata 'kernel.params[0].size' is a string, expected integer" in record_error(r.path)
    meta["kernel"]["params"][0]["size"] = 8
    rewrite_body(r.path, msgpack.packb({**meta, "kernel": {**meta["kernel"], "name": None}}))
    assert "metadata 'kernel.name' is nil, expected string" in record_error(r.path)
    rewrite_body(r.path, msgpack.packb({**meta, "kernel": {**meta["kernel"], "image": None}}))
    assert Record.load(r.path).kernel.image is None  # no image: a no-layout record
    meta["allocations"][0]["prologue"][0] = "../../../etc/passwd"
    rewrite_body(r.path, msgpack.packb(meta))
    assert "not a chunk name" in record_error(r.path)
    meta["allocations"][0]["prologue"] = []
    rewrite_body(r.path, msgpack.packb(meta))
    assert f"prologue has 0 chunks, {CS} bytes need 1" in record_error(r.path)


def test_unknown_keys_are_ignored(damaged):
    r = damaged[0]
    meta = msgpack.unpackb(r.path.read_bytes()[RECORD_HEADER.size:])
    meta["future_key"] = {"x": 1}
    meta["kernel"]["future"] = [1]
    rewrite_body(r.path, msgpack.packb(meta))
    assert Record.load(r.path).meta["future_key"] == {"x": 1}


def test_recording_lists_finished_records_only(tmp_path):
    one_region(tmp_path, b"a" * 10, b"b" * 10)
    records = tmp_path / "records"
    (records / ".hidden.kirrec").write_bytes(b"")
    (records / ".x.kirrec.77.1.tmp").write_bytes(b"")
    (records / "notes.txt").write_text("")
    shutil.copyfile(next(records.glob("*.kirrec")), records / "00000000000000000000000000000000.x.kirrec")
    paths = Recording(tmp_path).record_paths
    assert [p.name for p in paths] == sorted(p.name for p in records.glob("[!.]*.kirrec"))
    assert len(paths) == 2
    with pytest.raises(RecordError, match="not a kir recording"):
        Recording(tmp_path / "records")


# --- kir records -----------------------------------------------------------------------

def test_records_json_agrees_with_the_reader(tmp_path, kir_cli):
    rng = random.Random(6)
    one_region(tmp_path, rng.randbytes(CS + 1), rng.randbytes(CS + 1))
    b = builder(tmp_path, identity=h128("f" * 32), arg=struct.pack("<Q", BASE + 64))
    b.add_flag("unknown-pointer", "argument 1")
    b.add_global("counter", 0x1000, 4)
    b.write()
    result = kir_cli("records", "--json", tmp_path)
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    recording = Recording(tmp_path)
    assert listing["format"] == "kir.records/1" and listing["directory"] == str(tmp_path)
    assert listing["chunks"] == {"count": len(recording.chunk_paths), "bytes": recording.chunk_bytes()}
    assert [e["file"] for e in listing["records"]] == [p.name for p in recording.record_paths]
    for entry, r in zip(listing["records"], recording.records()):
        assert entry == {
            "file": r.path.name, "kernel": "k", "demangled": "k(int*)", "static_hash": r.kernel.static_hash,
            "launch_identity": r.launch.launch_identity, "dynamic_hash": r.launch.dynamic_hash,
            "grid": [2, 1, 1], "block": [128, 1, 1],
            "shared_bytes": 0, "ordinal": 0, "allocations": len(r.allocations), "globals": len(r.globals),
            "prologue_bytes": r.stats.prologue_bytes, "stored_bytes": r.stats.stored_bytes,
            "flags": [f.flag for f in r.flags]}
    assert sorted(e["flags"] for e in listing["records"]) == [[], ["unknown-pointer"]]

    table = kir_cli("records", tmp_path)
    assert table.returncode == 0 and table.stdout.count("k(int*)") == 2
    assert f"2 records, {len(recording.chunk_paths)} chunks" in table.stdout


def test_records_reports_a_bad_record_and_lists_the_rest(tmp_path, kir_cli):
    good = one_region(tmp_path, b"x" * 8, b"y" * 8)
    bad = tmp_path / "records" / ("1" * 32 + "." + "2" * 32 + ".kirrec")
    bad.write_bytes(good.path.read_bytes()[:50])
    result = kir_cli("records", "--json", tmp_path)
    assert result.returncode == 2
    assert [e["file"] for e in json.loads(result.stdout)["records"]] == [good.path.name]
    assert f"kir: error: {bad}: truncated" in result.stderr and "Traceback" not in result.stderr
    missing = kir_cli("records", tmp_path / "nowhere")
    assert missing.returncode == 2 and "not a kir recording" in missing.stderr


def test_records_prints_names_with_control_characters_escaped(tmp_path, kir_cli):
    """Issue 21 item 12: a record's kernel name is the recorded app's text. Printed raw
    it wrote terminal escapes and fake lines into `kir records`; now escaped, one row
    per record, and --json keeps the exact name."""
    demangled = "k\x1b[2J\x1b]0;pwned\x07(int*)\n0 records, 0 chunks (fake line)"
    b = builder(tmp_path)
    b.set_kernel("k", demangled, _core.static_hash("k", "cubin", [b"image"]), [0], [8])
    b.write()
    table = kir_cli("records", tmp_path)
    assert table.returncode == 0, table.stderr
    assert not any(c in table.stdout for c in "\x1b\x07"), repr(table.stdout)
    lines = table.stdout.splitlines()
    assert len(lines) == 3 and lines[1].endswith("k\\x1b[2J\\x1b]0;pwned\\x07(int*)\\x0a0 records, 0 chunks "
                                                 "(fake line)"), lines
    assert json.loads(kir_cli("records", "--json", tmp_path).stdout)["records"][0]["demangled"] == demangled


# --- replay plans ----------------------------------------------------------------------

def test_plan_of_a_real_cubin(tmp_path, built):
    r, kernel, args = axpy_record(tmp_path, built["kernels_sm90.cubin"])
    p = replay.plan(r, "cubin", "sm_90")
    assert p.hashes_match and p.notes == []
    assert p.hashes.static == str(_core.static_hash(AXPY, "cubin", [built["kernels_sm90.cubin"].read_bytes()]))
    assert p.code.kind == "cubin" and p.code_bytes() == built["kernels_sm90.cubin"].read_bytes()
    assert len(p.args) == kernel.params[-1].offset + kernel.params[-1].size
    for param, arg in zip(kernel.params, args):
        assert p.args[param.offset:param.offset + param.size] == arg
    assert (p.grid, p.block, p.shared_bytes) == ((4, 1, 1), (256, 1, 1), 0)
    assert p.reservations == [(BASE, 1 << 30)]
    assert [(m.address, m.size, m.exact) for m in p.mappings] == [(BASE, 1 << 21, False),
                                                                  (BASE + (1 << 21), 1 << 21, False)]
    assert [g.name for g in p.globals] == ["counter"]
    assert p.variant_launch_identity((4, 1, 1), (256, 1, 1)) == r.launch.launch_identity
    assert p.variant_launch_identity((8, 1, 1), (128, 1, 1)) == \
        ref.launch_identity(r.kernel.static_hash, "sm_90", args, [8, 1, 1], [128, 1, 1], 0)
    assert p.variant_launch_identity((4, 1, 1), (256, 1, 1), 4096) == \
        ref.launch_identity(r.kernel.static_hash, "sm_90", args, [4, 1, 1], [256, 1, 1], 4096)
    assert (p.hashes.identity, p.hashes.dynamic) == (r.launch.launch_identity, r.launch.dynamic_hash)


def test_an_altered_argument_breaks_the_launch_identity(tmp_path, built):
    def alter(args):
        args[3] = struct.pack("<i", 999)
    r, _, _ = axpy_record(tmp_path, built["kernels_sm90.cubin"], alter=alter)
    p = replay.plan(r)
    assert not p.hashes_match
    assert p.hashes.static == p.hashes.recorded_static and p.hashes.identity != p.hashes.recorded_identity
    assert any(n.startswith("launch identity mismatch") for n in p.notes)


def test_records_of_hash_format_1_still_load_and_check(tmp_path, built, kir_cli):
    """A record written before the launch identity carries only format 1's
    `dynamic_hash` (arguments, grid and block; no shared memory): it loads, and the
    plan checks that hash under format 1's recipe."""
    r, _, args = axpy_record(tmp_path, built["kernels_sm90.cubin"])
    old = as_version_1(r.path, identity=False)  # as format version 1's writer wrote it before the identity
    meta = msgpack.unpackb(r.path.read_bytes()[RECORD_HEADER.size:])
    v1 = ref.dynamic_hash(r.kernel.static_hash, "sm_90", args=[(i + 1, "bytes", a) for i, a in enumerate(args)],
                          grid=[4, 1, 1], block=[256, 1, 1])
    assert (old.launch.launch_identity, old.launch.dynamic_hash) == (None, v1)
    p = replay.plan(old)
    assert p.hashes_match and (p.hashes.identity, p.hashes.dynamic) == (None, v1) and p.notes == []
    text = kir_cli("replay", "--plan", r.path)
    assert f"dynamic   {v1}  matches (hash format 1)" in text.stdout and "identity  " not in text.stdout
    listing = json.loads(kir_cli("records", "--json", tmp_path).stdout)
    assert [(e["launch_identity"], e["dynamic_hash"]) for e in listing["records"]] == [(None, v1)]

    meta["launch"]["dynamic_hash"] = "0" * 32
    rewrite_body(r.path, msgpack.packb(meta), version=1)
    p = replay.plan(Record.load(r.path))
    assert not p.hashes_match and any(n.startswith("dynamic hash mismatch") for n in p.notes)
    del meta["launch"]["dynamic_hash"]
    rewrite_body(r.path, msgpack.packb(meta), version=1)
    assert "dynamic_hash" in record_error(r.path)


def test_replay_plan_cli(tmp_path, built, kir_cli):
    r, _, _ = axpy_record(tmp_path / "good", built["kernels_sm90.cubin"])
    result = kir_cli("replay", "--plan", "--json", r.path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["hashes_match"] is True and plan["static_hash"] == r.kernel.static_hash
    assert plan["code"]["kind"] == "cubin" and plan["grid"] == [4, 1, 1]
    text = kir_cli("replay", "--plan", r.path)
    assert "static    " + r.kernel.static_hash + "  matches" in text.stdout
    assert "identity  " + r.launch.launch_identity + "  matches" in text.stdout
    assert plan["launch_identity"] == plan["computed_launch_identity"] == r.launch.launch_identity
    assert plan["dynamic_hash"] == plan["computed_dynamic_hash"] == r.launch.dynamic_hash

    bad, _, _ = axpy_record(tmp_path / "bad", built["kernels_sm90.cubin"],
                            alter=lambda args: args.__setitem__(0, struct.pack("<f", 3.0)))
    result = kir_cli("replay", "--plan", "--json", bad.path)
    assert json.loads(result.stdout)["hashes_match"] is False
    assert "hashes do not match" in result.stderr

    wrong_arch = kir_cli("replay", "--plan", "--device-arch", "sm_80", r.path)
    assert wrong_arch.returncode == 2
    assert "the recorded cubin is for sm_90, the device is sm_80" in wrong_arch.stderr
    no_ptx = kir_cli("replay", "--plan", "--code", "ptx", r.path)
    assert no_ptx.returncode == 2 and f"the record holds no PTX for {AXPY}" in no_ptx.stderr
    no_ir = kir_cli("replay", "--plan", "--code", "ir", r.path)
    assert no_ir.returncode == 2 and "no LLVM IR" in no_ir.stderr and "Traceback" not in no_ir.stderr


def test_plan_picks_the_ptx(tmp_path, built):
    ptx = b"//\n.version 8.0\n.target sm_90\n.address_size 64\n"
    r, _, _ = axpy_record(tmp_path, built["kernels_sm90.cubin"], ptx=ptx)
    p = replay.plan(r, "ptx", "sm_90")
    assert p.code.kind == "ptx" and p.code_bytes() == ptx
    with pytest.raises(replay.PlanError, match="the PTX is for sm_90, newer than the device"):
        replay.plan(r, "ptx", "sm_80")


def test_mappings_round_to_the_granularity_and_merge(tmp_path):
    g = 1 << 21
    b = builder(tmp_path)
    b.set_va_range(BASE, 1 << 30)
    regions = [(BASE + 0x1000, 100), (BASE + 0x3000, 100),        # one granule
               (BASE + 2 * g - 10, 20), (BASE + 2 * g + 64, 8),   # granules 1 and 2, then 2
               (BASE + 5 * g, g),                                 # exactly granule 5
               (0x5000_0000_0000 + 0x10, 64)]                     # outside the range
    for address, size in regions:
        i = b.add_allocation(address, size, "device", (address >> 40) == (BASE >> 40))
        b.snapshot(i, False, bytes(size))
        b.snapshot(i, True, bytes(size))
    b.add_allocation(BASE + 9 * g, 64, "managed", True)            # not snapshotted
    p = replay.plan(Record.load(b.write()), granularity=g)
    assert [(m.address, m.size, m.exact, len(m.regions)) for m in p.mappings] == [
        (0x5000_0000_0000, g, True, 1), (BASE, g, False, 2), (BASE + g, 2 * g, False, 2),
        (BASE + 5 * g, g, False, 1)]
    # Reserved in windows the driver places where asked: 32 MiB-aligned, 32 MiB at least.
    assert p.reservations == [(0x5000_0000_0000, 32 << 20), (BASE, 1 << 30)]
    assert [(r.address, why.split(" ")[0]) for r, why in p.skipped] == [(BASE + 9 * g, "not")]
    with pytest.raises(replay.PlanError, match="power of two"):
        replay.plan(p.record, granularity=3 << 20)


def test_reservation_windows_cover_and_merge(tmp_path):
    g, w = 1 << 21, 32 << 20
    b = builder(tmp_path)
    b.set_va_range(BASE + 0x1000, 1 << 20)                          # unaligned, small
    spans = [(BASE + 0x2000, 64), (BASE + w + 5 * g, 64),           # in the range; outside, next window
             (BASE + 3 * w - 16, 32)]                               # outside, straddling two windows
    for address, size in spans:
        i = b.add_allocation(address, size, "device", address < BASE + (1 << 20))
        b.snapshot(i, False, bytes(size))
        b.snapshot(i, True, bytes(size))
    p = replay.plan(Record.load(b.write()), granularity=g)
    assert [m.exact for m in p.mappings] == [False, True, True]
    assert p.reservations == [(BASE, w), (BASE + w, w), (BASE + 2 * w, 2 * w)]  # touching: not merged


def test_arguments_must_fit_their_parameters(tmp_path):
    b = builder(tmp_path, arg=b"\1\2\3")  # 3 bytes for an 8-byte parameter
    with pytest.raises(replay.PlanError, match=r"argument 1 is 3 bytes, the parameter is 8 \(offset 0\)"):
        replay.plan(Record.load(b.write()))


# --- comparing memory ------------------------------------------------------------------

def test_bitwise_comparison():
    region = kir.record.Region(0, 0x1000, 12, [], [], kind="device")
    assert replay.compare(region, b"a" * 12, b"a" * 12) is None
    m = replay.compare(region, b"aaaXaaaaYZaa", b"a" * 12)
    assert (m.region, m.address, m.first_offset, m.differing_bytes) == ("device allocation at 0x1000", 0x1000, 3, 3)


@pytest.mark.parametrize("norm,value", [("linf", 0.5), ("l1", 0.75), ("l2", (0.5 ** 2 + 0.25 ** 2) ** 0.5)])
def test_comparison_with_a_tolerance(norm, value):
    region = kir.record.Region(0, 0x1000, 16, [], [], kind="device")
    expected = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    actual = struct.pack("<4f", 1.0, 2.5, 3.0, 3.75)
    loose = replay.Tolerance(atol=value + 1e-6, norm=norm)
    assert replay.compare(region, actual, expected, loose) is None
    m = replay.compare(region, actual, expected, replay.Tolerance(atol=value - 1e-6, norm=norm))
    # 2.0 -> 2.5 changes byte 6 (0x40000000 -> 0x40200000), 4.0 -> 3.75 byte 14
    assert m.norm == pytest.approx(value) and (m.first_offset, m.differing_bytes) == (6, 2)
    relative = replay.Tolerance(rtol=1.0, norm=norm)  # limit: the norm of the expected values
    assert replay.compare(region, actual, expected, relative) is None
    nan = struct.pack("<4f", 1.0, float("nan"), 3.0, 4.0)
    assert replay.compare(region, nan, expected, replay.Tolerance(atol=1e9, norm=norm)) is not None
    with pytest.raises(ValueError, match="norm 'l3'"):
        replay.Tolerance(norm="l3")


def test_tolerances_by_region():
    alloc = kir.record.Region(0, 0x1000, 4, [], [], kind="device")
    glob = kir.record.Region(1, 0x2000, 4, [], [], kind="global", name="g")
    loose, default = replay.Tolerance(atol=1), replay.Tolerance(atol=2)
    table = {"g": loose, 0x1000: default}
    assert replay.tolerance_for(glob, table) is loose and replay.tolerance_for(alloc, table) is default
    assert replay.tolerance_for(glob, {None: default}) is default and replay.tolerance_for(alloc, {}) is None


def test_replay_without_a_gpu_says_so(tmp_path, built, kir_cli):
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS:
            pytest.skip("this machine has a CUDA driver")
    except Exception:
        pass
    r, _, _ = axpy_record(tmp_path, built["kernels_sm90.cubin"])
    result = kir_cli("replay", "--json", r.path)
    assert result.returncode == 2 and result.stderr.startswith("kir: error: no CUDA device: "), result.stderr
    assert result.stdout == ""


# --- LLVM IR to PTX ------------------------------------------------------------------

KERNEL_CU = source("record/record_reader_kernel.cu")


@pytest.fixture(scope="module")
def bitcode(tmp_path_factory):
    """Two tiny CUDA kernels compiled to bitcode by clang: one calls libdevice."""
    clang = shutil.which("clang-22")
    if not clang:
        pytest.skip("clang-22 is not installed")
    folder = tmp_path_factory.mktemp("ir")
    (folder / "k.cu").write_text(KERNEL_CU)
    out = {}
    for name, sine in (("plain", ""), ("libdevice", "__nv_sinf")):
        path = folder / f"{name}.bc"
        subprocess.run([clang, "-x", "cuda", "--cuda-device-only", "-emit-llvm", "-c", "--cuda-gpu-arch=sm_90",
                        "-nocudainc", "-nocudalib", "-Wno-unknown-cuda-version", "-O1", f"-DSINE={sine}",
                        folder / "k.cu", "-o", path], check=True, capture_output=True)
        out[name] = path.read_bytes()
    return out


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_ir_compiles_to_ptx(bitcode, arch):
    assert libdevice.calls_in(bitcode["plain"]) == []
    ptx = kir.jit.compile(bitcode["plain"], "_Z5scalefPfi", arch, options={"kind": "ptx"}).ptx
    assert ".visible .entry _Z5scalefPfi(" in ptx and f".target {arch}" in ptx


def test_ir_calling_libdevice_links_it(bitcode):
    assert libdevice.calls_in(bitcode["libdevice"]) == ["__nv_sinf"]
    libdevice.find()  # skips nothing: the CUDA toolkit is on this machine
    ptx = kir.jit.compile(bitcode["libdevice"], "_Z5scalefPfi", "sm_90", options={"kind": "ptx"}).ptx
    assert ".visible .entry _Z5scalefPfi(" in ptx
    assert "__nv_sinf" not in ptx            # linked and inlined, not left as a call
    assert ".visible .func" not in ptx       # libdevice's unused functions were dropped


def test_plan_with_ir(tmp_path, bitcode, kir_cli, monkeypatch):
    b = builder(tmp_path)
    # the record's kernel is the IR's (kir.jit compiles that kernel of the module)
    b.set_kernel("_Z5scalefPfi", "scale(float, float*, int)", _core.static_hash("_Z5scalefPfi", "cubin", [b"image"]),
                 [0], [8])
    b.set_ir(bitcode["libdevice"])
    r = Record.load(b.write())
    p = replay.plan(r, "ir", "sm_90")
    assert p.code.kind == "ir" and p.code.libdevice == libdevice.find()
    assert "linked with libdevice (1 function: __nv_sinf)" in p.code.reason
    assert b".visible .entry _Z5scalefPfi(" in p.code_bytes()
    result = kir_cli("replay", "--plan", "--code", "ir", r.path)
    assert result.returncode == 0 and "libdevice" in result.stdout, result.stderr
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    with pytest.raises(replay.PlanError, match=r"the IR calls __nv_sinf: libdevice is not at .*no-cuda"):
        replay.plan(r, "ir", "sm_90")


def test_unreadable_ir_is_a_plan_error(tmp_path):
    b = builder(tmp_path)
    b.set_ir(b"BC\xc0\xde but not really")
    with pytest.raises(replay.PlanError, match="cannot read the record's IR"):
        replay.plan(Record.load(b.write()), "ir")


# --- kir record --------------------------------------------------------------------

def recorder_installed() -> bool:
    return (Path(kir.__file__).parent / "lib" / "libkir_record.so").exists()


@pytest.mark.skipif(not recorder_installed(), reason="libkir_record.so is not in this installation")
def test_record_passes_options_to_the_recorder(tmp_path, kir_cli):
    script = "env | grep -E '^(KIR_|LD_PRELOAD)' | sort; exit 3"
    result = kir_cli("record", "-o", tmp_path / "rec", "--kernels", "axpy|scale", "--max-per-kernel", "0",
                     "--skip", "2", "--ranks", "0,3", "--reachable", "--va-base", "7f0000000000",
                     "--va-size", "64G", "--", "sh", "-c", script)
    assert result.returncode == 3, result.stderr  # the app's own status
    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    lib = Path(kir.__file__).parent / "lib"
    assert env["LD_PRELOAD"].split()[0] == str(lib / "libkir_hook.so")
    assert env["KIR_HOOK_CLIENTS"] == str(lib / "libkir_record.so")
    assert {k: v for k, v in env.items() if k.startswith("KIR_RECORD")} == {
        "KIR_RECORD_DIR": str(tmp_path / "rec"), "KIR_RECORD_KERNELS": "axpy|scale",
        "KIR_RECORD_MAX_PER_KERNEL": "0", "KIR_RECORD_SKIP": "2", "KIR_RECORD_RANKS": "0,3",
        "KIR_RECORD_REACHABLE": "1", "KIR_RECORD_VA_BASE": "0x7f0000000000",
        "KIR_RECORD_VA_SIZE": str(64 << 30)}
    assert result.stderr.strip().endswith(f"kir: recorded 0 launches of 0 kernels in {tmp_path / 'rec'} "
                                          "(0.0 MiB stored)")


@pytest.mark.skipif(not recorder_installed(), reason="libkir_record.so is not in this installation")
def test_record_defaults(tmp_path, kir_cli):
    result = kir_cli("record", "--", "sh", "-c", "env | grep ^KIR_RECORD | sort", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"KIR_RECORD_DIR={tmp_path / 'kir-records'}",
                                          "KIR_RECORD_MAX_PER_KERNEL=4", "KIR_RECORD_SKIP=0"]


@pytest.mark.parametrize("option", [["--va-size", "12Q"], ["--va-base", "xyz"], ["--ranks", "1,a"],
                                    ["--kernel", "("], ["--no-va", "--va-size", "1G"],
                                    ["--max-per-kernel", "-1"]])
def test_record_rejects_bad_options_before_running(tmp_path, kir_cli, option):
    marker = tmp_path / "ran"
    result = kir_cli("record", "-o", tmp_path, *option, "--", "touch", marker)
    assert result.returncode == 2 and result.stderr.startswith("kir: error: "), result.stderr
    assert option[-2] in result.stderr  # the message names the option
    assert not marker.exists()


def test_record_app_passes_the_recorder_settings(tmp_path, capfd):
    """kir.record.record_app: the Python twin of `kir record` (the recorder itself
    needs a GPU: tests/record/test_record_gpu.py)."""
    from kir.record import record_app
    script = "echo $KIR_RECORD_DIR $KIR_RECORD_RANKS $KIR_RECORD_KERNELS $KIR_RECORD_VA_BASE $PMI_RANK; exit 3"
    status, recording = record_app(["sh", "-c", script], tmp_path / "rec", ranks=[0, 2], kernels="axpy",
                                   va_base=0x200000000000, env={"PMI_RANK": "2"})
    out = capfd.readouterr().out.split()
    assert status == 3 and out == [str(tmp_path / "rec"), "0,2", "axpy", "0x200000000000", "2"]
    assert recording.records() == [] and recording.directory == tmp_path / "rec"


def test_a_record_without_an_image_is_read_but_not_planned(tmp_path):
    """A no-layout record (the hook held no image) reads back, and the planner
    refuses it with the reason instead of failing on the missing image."""
    b = _core.RecordBuilder(str(tmp_path), CS)
    b.set_kernel("k", "k()", _core.static_hash("k", "unknown", []), [], [])
    b.set_launch("cudaLaunchKernel", _core.xxh3_128(b"d"), (1, 1, 1), (1, 1, 1), 0, 0, [], 0)
    b.add_flag("no-layout", "no image")
    record = Record.load(b.write())
    assert record.kernel.image is None and [f.flag for f in record.flags] == ["no-layout"]
    with pytest.raises(replay.PlanError, match="holds no device image"):
        replay.plan(record)


# --- the planner's static hash is the hook's ------------------------------------------

def test_planner_hashes_each_kernel_as_the_hook_registered_it(tmp_path, built, kir_cli):
    """proteus_cuda_shared embeds Proteus IR in one translation unit's cubin. Under the
    hook (no GPU: it takes each fatbin's newest cubin) every kernel is registered with
    THE policy's static hash; a record of the image the hook hashed, stamped with the
    hook's value as the recorder stamps it, plans with that same hash — "ir" for the
    unit with IR, the cubin for the other — which the Python reference agrees with."""
    import hash_reference as ref
    if "proteus_cuda_shared" not in built:
        pytest.skip("clang-22 not installed: the Proteus fixture cannot be built")
    app = built["proteus_cuda_shared"]
    trace = kir_cli("trace", "--json", "--", app)
    hook = {e["kernel"]: e["static"] for e in map(json.loads, (l for l in trace.stdout.splitlines()
                                                                if l.startswith("{")))
            if e["event"] == "register-kernel"}
    newest = {}  # kernel -> the newest cubin holding it (the hook's pick without a device)
    for image in kir.open(app).images:
        if image.kind == "cubin":
            for k in image.kernels:
                if k.name not in newest or image.arch > newest[k.name].arch:
                    newest[k.name] = image
    assert newest and set(newest) <= set(hook)
    kinds = set()
    for name, image in newest.items():
        data = image.read()
        modules = [m.bitcode for m in image.code.ir if not m.kernel]
        expected = ref.static_hash(name, "ir", modules) if modules else ref.static_hash(name, "cubin", [data])
        b = _core.RecordBuilder(str(tmp_path / name), CS)
        b.set_kernel(name, kir.demangle(name), h128(hook[name]), [], [])
        b.set_image("cubin", image.arch, data)
        b.set_launch("cudaLaunchKernel", _core.xxh3_128(name.encode()), (1, 1, 1), (1, 1, 1), 0, 0, [], 0)
        p = replay.plan(Record.load(b.write()), "cubin", image.arch)
        assert p.hashes.static == p.hashes.recorded_static == hook[name] == expected, name
        assert not any(n.startswith("static hash mismatch") for n in p.notes)
        kinds.add("ir" if modules else "cubin")
    assert kinds == {"ir", "cubin"}  # both rules of the policy exercised


def test_planner_reports_a_static_hash_the_image_does_not_give(tmp_path, built):
    """A record stamped with the hash of other bytes (here: the old whole-image hash of
    a kernel whose image embeds IR) plans with a mismatch note naming both hashes."""
    image = next(i for i in kir.open(built["proteus_cuda"]).images
                 if i.kind == "cubin" and any(not m.kernel for m in i.code.ir))
    name = image.kernels[0].name
    stale = _core.static_hash(name, "cubin", [image.read()])
    b = _core.RecordBuilder(str(tmp_path), CS)
    b.set_kernel(name, kir.demangle(name), stale, [], [])
    b.set_image("cubin", image.arch, image.read())
    b.set_launch("cudaLaunchKernel", _core.xxh3_128(b"x"), (1, 1, 1), (1, 1, 1), 0, 0, [], 0)
    p = replay.plan(Record.load(b.write()), "cubin", image.arch)
    code = image.code
    assert p.hashes.static == str(_core.kernel_static_hash(code, name)) != str(stale)
    assert f"static hash mismatch: the record says {stale}, its image hashes to {p.hashes.static}" in p.notes


def test_an_image_that_does_not_decode_hashes_as_the_hook_hashes_it(tmp_path):
    """The hook registers a kernel whose image it cannot decode with code kind
    "unknown"; the planner recomputes the same."""
    b = builder(tmp_path)
    r = Record.load(b.write())
    unknown = _core.static_hash(r.kernel.name, "unknown", [])
    assert replay.static_hash(r) == unknown
