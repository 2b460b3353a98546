"""The record metadata's one field table (kir/record/metadata.hpp) and the format's
versions: the writer writes through the table, kir.record reads by walking it, and
the doc's tables and the JSON schemas are generated from it. Write -> read -> write
gives the same bytes on recordings of the existing rigs; a version-1 recording made
by the version-1 writer (tests/fixtures/records_v1) still reads; a record is read by
its version, never by guessing from its keys."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import msgpack
import pytest

import hash_reference as ref
from kir import _core, record_schema
from kir.errors import KirError
from kir.record import FORMAT, METADATA_TABLES, RECORD_LAYOUT, Record, RecordError, Recording
from record_builders import as_version_1, axpy_record, rewrite_body
from record_fuzz import write_recording

ROOT = Path(__file__).resolve().parents[2]
V1 = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"
VERSION = FORMAT["version"]


def every_field(directory: Path) -> Path:
    """A record with every optional part: PTX, IR, PTX units, JIT arguments, a VA
    range, a snapshotted and an unsnapshotted allocation, a global, flags."""
    static = _core.static_hash("_Z1kPfi", "cubin", [b"image"])
    b = _core.RecordBuilder(str(directory), 4096)
    b.set_process(99, 2)
    b.set_device("NVIDIA H200", "sm_90", 1)
    b.set_kernel("_Z1kPfi", "k(float*, int)", static, [0, 8], [8, 4])
    b.set_image("cubin", "sm_90", b"image")
    b.set_ptx("sm_90", b".version 8.0\n")
    b.set_ir(b"BC\xc0\xde")
    b.add_ptx_unit("sm_90", b"// unit a\n")
    b.add_ptx_unit("sm_90", b"// unit b\n")
    b.set_jit_args([(2, "scalar", 3, False, 0, 0, 0), (1, "array", 11, True, 4, 0, 0)])
    b.set_launch("cuLaunchKernel", _core.xxh3_128(b"identity"), (70000, 2, 1), (1024, 1, 1), 49152, 1 << 40,
                 [struct.pack("<Q", 0x7F00_0000_0000), b"\xff" * 4], 123456)
    b.set_va_range(0x7F00_0000_0000, 1 << 34)
    region = b.add_allocation(0x7F00_0000_0000, 5000, "device", True)
    b.snapshot(region, False, bytes(5000))
    b.snapshot(region, True, b"\x01" * 5000)
    b.add_allocation(0x1000, 64, "host-pinned", False)
    g = b.add_global("table", 0xDEAD0000, 8)
    b.snapshot(g, False, bytes(8))
    b.snapshot(g, True, bytes(8))
    b.add_flag("host-pointer", "argument 3")
    return Path(b.write())


@pytest.fixture(scope="module")
def recordings(tmp_path_factory, built) -> list[Path]:
    """Record files written by the C++ writer through the test rigs."""
    base = tmp_path_factory.mktemp("records")
    paths = [write_recording(base / "fuzz")[0], every_field(base / "every")]
    r, _, _ = axpy_record(base / "axpy", built["kernels_sm90.cubin"])
    return paths + [r.path]


def body(path: Path) -> bytes:
    return path.read_bytes()[RECORD_LAYOUT.size:]


def file_of(record: Record) -> bytes:
    """A record file rewritten from a record's fields alone: the header (from the
    format's description) and its metadata re-packed in the table's order."""
    data = msgpack.packb(record.metadata())
    digest = _core.xxh3_128(data)
    return RECORD_LAYOUT.struct.pack(RECORD_LAYOUT.magic, record.version, 0, len(data), digest.high,
                                     digest.low) + data


# --- write -> read -> write ---------------------------------------------------------

def test_write_read_write_is_byte_identical(recordings):
    for path in recordings:
        record = Record.load(path)
        assert file_of(record) == path.read_bytes(), path
        assert record.metadata() == record.meta  # nothing read is lost, nothing added


def test_the_writer_writes_every_table_key_in_table_order(recordings):
    """Each map the writer wrote holds exactly its table's keys of this version, in order."""
    def walk(value: dict, table: str):
        fields = [f for f in METADATA_TABLES[table]["fields"] if f["first"] <= VERSION
                  and (not f["until"] or VERSION <= f["until"])]
        assert list(value) == [f["key"] for f in fields], table
        for f in fields:
            item = value[f["key"]]
            if f["type"] == "map" and item is not None:
                walk(item, f["table"])
            elif f["type"] == "maps":
                for element in item:
                    walk(element, f["table"])
    for path in recordings:
        walk(msgpack.unpackb(body(path)), FORMAT["metadata"]["root"])


def test_the_writer_refuses_a_value_the_format_cannot_hold(tmp_path):
    """The table's bounds hold for the writer too: a parameter past the 64 KiB cap
    a reader accepts is not written (the reader would refuse the record)."""
    b = _core.RecordBuilder(str(tmp_path), 4096)
    b.set_kernel("k", "k()", _core.xxh3_128(b"k"), [70000], [8])
    b.set_launch("cudaLaunchKernel", _core.xxh3_128(b"d"), (1, 1, 1), (1, 1, 1), 0, 0, [bytes(8)], 0)
    with pytest.raises(KirError, match=r"record not written: metadata param\.offset: 70000 is not from 0 to 65536"):
        b.write()
    assert list((tmp_path / "records").iterdir()) == []


# --- generated files ----------------------------------------------------------------

def test_the_checked_in_schemas_and_doc_tables_are_generated():
    """docs/schemas/record-v<N>.schema.json and the key tables of docs/record-format.md
    are what the field table gives. A released version's schema never changes: a field
    added, removed or changed is a new format version (docs/record-format.md)."""
    differ = record_schema.write(ROOT, check=True)
    assert differ == [], (f"{[str(p) for p in differ]} differ from kir/record/metadata.hpp: run "
                          "`python -m kir.record_schema .`; a change to a released version's fields needs a new "
                          "version (format::kVersion + 1)")
    assert sorted(p.name for p in (ROOT / "docs" / "schemas").glob("record-v*.schema.json")) == \
        sorted(f"record-v{v}.schema.json" for v in FORMAT["versions"])


def test_every_key_of_the_table_is_in_the_doc():
    text = (ROOT / "docs" / "record-format.md").read_text()
    for name, table in METADATA_TABLES.items():
        section = text.split(f"\n`{name}`: ", 1)[1].split("\n\n", 2)[1]  # the table after its title
        assert [line.split("|")[1].strip() for line in section.splitlines()[2:]] == \
            [f"`{f['key']}`" for f in table["fields"]], name


def test_the_versions_follow_the_rule():
    """Only version 1 had optional fields; every field's versions are known ones."""
    for table in METADATA_TABLES.values():
        for f in table["fields"]:
            assert f["since"] in FORMAT["versions"] and f["first"] in FORMAT["versions"]
            assert f["first"] == f["since"] or (f["first"], f["since"]) == (1, 2), f
            assert not f["until"] or f["until"] < VERSION


# --- version 1 ----------------------------------------------------------------------

@pytest.fixture
def v1(tmp_path) -> Path:
    """A copy of the version-1 recording (tests/fixtures/records_v1/make.py)."""
    shutil.copytree(V1 / "recording", tmp_path / "v1")
    [path] = Recording(tmp_path / "v1").record_paths
    return path


def test_a_version_1_recording_still_reads(v1):
    assert v1.read_bytes()[8:12] == struct.pack("<I", 1)
    r = Record.load(v1)
    r.check()  # every chunk
    static = _core.static_hash("_Z1kPfi", "cubin", [b"\x7fELF-image-of-format-1"])
    args = [struct.pack("<Q", 0x7F00_0000_0000), struct.pack("<i", 5)]
    assert (r.version, r.kernel.static_hash, r.launch.args) == (1, str(static), args)
    dynamic = ref.dynamic_hash(str(static), "sm_90", args=[(i + 1, "bytes", a) for i, a in enumerate(args)],
                               grid=[3, 2, 1], block=[64, 4, 2])
    identity = str(_core.xxh3_128(b"launch identity of format 1"))
    assert (r.launch.launch_identity, r.launch.dynamic_hash, r.launch.identity) == (identity, dynamic, identity)
    assert r.code("image") == b"\x7fELF-image-of-format-1" and r.ptx_units() == [b".version 8.0\n// unit a\n"]
    assert [(a.position, a.kind, a.type, a.by_value) for a in r.kernel.jit_args] == [(2, "scalar", 3, False)]
    assert r.prologue(0) == bytes(i * 7 & 0xFF for i in range(2 * 4096 + 5))
    assert r.epilogue("table") == bytes(reversed(range(64)))
    assert [(f.flag, f.detail) for f in r.flags] == [("host-pointer", "argument 3 points into pinned host memory")]
    assert file_of(r) == v1.read_bytes()  # read -> write of version 1 too


def test_the_version_1_helper_writes_as_the_version_1_writer_did(v1, tmp_path):
    """tests/record/test_record_reader.py's as_version_1 (what tests use to make version-1
    records of their own) gives the maps, keys and key order of the recording the
    version-1 writer wrote."""
    def shape(value):
        if isinstance(value, dict):
            return [(k, shape(v)) for k, v in value.items()]
        return [shape(value[0])] if isinstance(value, list) and value and isinstance(value[0], dict) else None
    made = as_version_1(every_field(tmp_path / "fresh"))
    assert shape(made.meta) == shape(msgpack.unpackb(body(v1)))
    assert made.path.read_bytes()[8:12] == v1.read_bytes()[8:12] == struct.pack("<I", 1)


def test_a_version_1_record_before_its_optional_fields_reads(v1):
    """Keys added within version 1 may be absent from a version-1 record (they read as
    empty); the same keys are required in version 2: the version decides, not the keys."""
    meta = msgpack.unpackb(body(v1))
    del meta["launch"]["launch_identity"], meta["kernel"]["ptx_units"], meta["kernel"]["jit_args"]
    for key in ("store_seconds", "store_hash_seconds", "sync_seconds"):
        del meta["stats"][key]
    rewrite_body(v1, msgpack.packb(meta), version=1)
    r = Record.load(v1)
    assert (r.launch.launch_identity, r.kernel.ptx_units, r.kernel.jit_args) == (None, [], [])
    assert r.launch.identity == r.launch.dynamic_hash == meta["launch"]["dynamic_hash"]
    assert (r.stats.store_seconds, r.stats.sync_seconds) == (0.0, 0.0)

    meta["version"] = VERSION  # the same keys as a version-2 record: ptx_units missing
    rewrite_body(v1, msgpack.packb(meta), version=VERSION)
    with pytest.raises(RecordError, match="metadata has no 'kernel.ptx_units'"):
        Record.load(v1)


def test_dynamic_hash_is_read_from_version_1_alone(v1, recordings):
    meta = msgpack.unpackb(body(v1))
    del meta["launch"]["dynamic_hash"]
    rewrite_body(v1, msgpack.packb(meta), version=1)
    with pytest.raises(RecordError, match="metadata has no 'launch.dynamic_hash'"):
        Record.load(v1)
    # a version-2 record's `dynamic_hash`, were one there, is an unknown key: not read
    path = recordings[0]
    meta = msgpack.unpackb(body(path))
    meta["launch"]["dynamic_hash"] = "0" * 32
    copy = v1.parent / path.name
    copy.write_bytes(path.read_bytes())
    rewrite_body(copy, msgpack.packb(meta))
    assert Record.load(copy).launch.dynamic_hash is None


def test_the_header_and_the_metadata_name_one_version(v1):
    meta = msgpack.unpackb(body(v1))
    rewrite_body(v1, msgpack.packb(meta), version=VERSION)
    with pytest.raises(RecordError, match=f"metadata 'version' is 1, the header \\(byte 8\\) says {VERSION}"):
        Record.load(v1)
