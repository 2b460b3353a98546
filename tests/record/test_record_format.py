"""The record format is described once, in C++ (kir/record/format.hpp): the writer
writes through that description, the bindings export it (_core.record_format()),
and kir.record reads with it and keeps no layout of its own. Checked against the
spec (docs/record-format.md) and against files the C++ writer wrote."""
from __future__ import annotations

import ast
import random
import re
import struct
from pathlib import Path

import pytest

from kir import _core, record

ROOT = Path(__file__).resolve().parents[2]
FORMAT = _core.record_format()
HEADERS = {"record_header": "Record file (`.kirrec`)", "chunk_header": "Chunk file (`.kirc`)"}


def spec_table(title: str) -> list[tuple[int, str, str]]:
    """(offset, size, field) rows of the table under `## <title>` in docs/record-format.md."""
    text = (ROOT / "docs" / "record-format.md").read_text()
    section = text.split(f"## {title}\n", 1)[1]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|$", section.split("\n\n", 1)[0], re.M)
    return [(int(offset), size.strip(), field.strip()) for offset, size, field in rows]


@pytest.mark.parametrize("header", HEADERS)
def test_description_matches_the_spec(header):
    """Every row of the spec's table is covered exactly by the description's fields
    (the 16-byte hash row by hash_high then hash_low); the payload starts at its size."""
    d = FORMAT[header]
    rows = spec_table(HEADERS[header])
    fixed = [(o, int(s), f) for o, s, f in rows if s.isdigit()]
    payload = [o for o, s, _ in rows if not s.isdigit()]
    assert payload == [d["size"]]
    fields = {offset: (name, size, kind) for name, offset, size, kind in d["fields"]}
    for offset, size, text in fixed:
        covered, at = [], offset
        while at < offset + size:
            name, width, kind = fields[at]
            covered.append(name)
            at += width
        assert at == offset + size, (text, covered)
        if text.startswith("magic"):
            assert covered == ["magic"] and text == f"magic `{d['magic'].decode()}`"
        if "version" in text:
            assert covered == ["version"] and f"({FORMAT['version']})" in text
        if "XXH3-128" in text:
            assert covered == ["hash_high", "hash_low"]
    assert sum(size for _, size, _ in fixed) == d["size"]
    assert FORMAT["version"] in FORMAT["versions"]
    assert f"version {FORMAT['version']})" in (ROOT / "docs" / "record-format.md").read_text().splitlines()[0]


def test_codecs_match_the_spec():
    [(_, _, text)] = [r for r in spec_table(HEADERS["chunk_header"]) if r[2].startswith("codec")]
    assert FORMAT["codecs"] == {0: "raw", 1: "zstd"}
    assert text == "codec: 0 stored raw, 1 zstd (one frame)"


def test_the_reader_uses_the_description():
    """kir.record's constants are the exported description's values, its structs are
    built from the exported fields, and its source holds no layout of its own: no
    bytes literal, no struct format, no suffix or format name (docstrings aside)."""
    assert record.VERSIONS == FORMAT["versions"] and record.CODECS == FORMAT["codecs"]
    assert record.METADATA_FORMAT == FORMAT["metadata_format"]
    assert (record.RECORD_SUFFIX, record.CHUNK_SUFFIX) == (FORMAT["record_suffix"], FORMAT["chunk_suffix"])
    for layout, header in ((record.RECORD_LAYOUT, "record_header"), (record.CHUNK_LAYOUT, "chunk_header")):
        d = FORMAT[header]
        assert layout.magic == d["magic"] and layout.size == layout.struct.size == d["size"]
        assert layout.offset == {name: offset for name, offset, _, _ in d["fields"]}
        for name, offset, size, _ in d["fields"]:  # each field unpacks from its own offset
            data = bytearray(d["size"])
            data[offset:offset + size] = bytes(range(1, size + 1))
            values = layout.unpack(bytes(data))
            assert values[name] == (bytes(range(1, size + 1)) if size == 8 and name == "magic"
                                    else int.from_bytes(bytes(range(1, size + 1)), "little"))
            assert all(v in (0, bytes(8)) for k, v in values.items() if k != name)
    assert (record.RECORD_HEADER, record.CHUNK_HEADER) == (record.RECORD_LAYOUT.struct, record.CHUNK_LAYOUT.struct)

    source = (ROOT / "python" / "kir" / "record.py").read_text()
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docstrings]
    assert [v for v in literals if isinstance(v, bytes) and v] == []
    layout_text = re.compile(r"^[<>=!@]\w*\d*[sIQ]|KIR(REC|CHUNK)|\.kirr?e?c$|^kir\.record$")
    assert [v for v in literals if isinstance(v, str) and layout_text.search(v)] == []
    ints = {v for v in literals if isinstance(v, int) and not isinstance(v, bool)}
    assert not ints & {12, 16, 24, 32, 40, 48}, "a header offset or size written out in record.py"


def test_the_writer_writes_through_the_description(tmp_path):
    """Files the C++ writer wrote, read field by field with the description alone."""
    b = _core.RecordBuilder(str(tmp_path), 1 << 16)
    b.set_kernel("k", "k()", _core.static_hash("k", "cubin", [b"image"]), [0], [8])
    b.set_image("cubin", "sm_90", random.Random(1).randbytes(4096))  # incompressible: stored raw
    b.set_launch("cudaLaunchKernel", _core.xxh3_128(b"d"), (1, 1, 1), (1, 1, 1), 0, 0, [bytes(8)], 0)
    region = b.add_allocation(0x10000, 1 << 17, "device", False)
    b.snapshot(region, False, bytes(1 << 17))
    b.snapshot(region, True, bytes(range(256)) * 512)
    path = Path(b.write())
    assert path.name.endswith(FORMAT["record_suffix"]) and path.parent.name == "records"

    def fields(header: str, data: bytes) -> dict:
        out = {}
        for name, offset, size, kind in FORMAT[header]["fields"]:
            raw = data[offset:offset + size]
            out[name] = raw if kind == "bytes" else int.from_bytes(raw, "little")
        return out

    data = path.read_bytes()
    h = fields("record_header", data)
    size = FORMAT["record_header"]["size"]
    assert h["magic"] == FORMAT["record_header"]["magic"] and h["version"] == FORMAT["version"]
    assert h["reserved"] == 0 and h["body_size"] == len(data) - size
    assert f"{h['hash_high']:016x}{h['hash_low']:016x}" == str(_core.xxh3_128(data[size:]))

    chunks = sorted((tmp_path / "chunks").iterdir())
    assert chunks and all(c.name.endswith(FORMAT["chunk_suffix"]) for c in chunks)
    codecs = set()
    for chunk in chunks:
        data = chunk.read_bytes()
        h = fields("chunk_header", data)
        size = FORMAT["chunk_header"]["size"]
        assert h["magic"] == FORMAT["chunk_header"]["magic"] and h["version"] == FORMAT["version"]
        assert h["stored_size"] == len(data) - size
        assert f"{h['hash_high']:016x}{h['hash_low']:016x}" + FORMAT["chunk_suffix"] == chunk.name
        codecs.add(FORMAT["codecs"][h["codec"]])
        raw = data[size:] if FORMAT["codecs"][h["codec"]] == "raw" else \
            _core.zstd_decompress(data[size:], h["raw_size"])
        assert len(raw) == h["raw_size"] and str(_core.xxh3_128(raw)) + FORMAT["chunk_suffix"] == chunk.name
    assert codecs == {"raw", "zstd"}  # the random image stored raw, the rest compressed


def test_an_error_names_the_offset_from_the_description(tmp_path):
    """A damaged field is reported at the byte offset the description gives it."""
    b = _core.RecordBuilder(str(tmp_path), 1 << 16)
    b.set_kernel("k", "k()", _core.static_hash("k", "cubin", [b"image"]), [], [])
    b.set_launch("cudaLaunchKernel", _core.xxh3_128(b"d"), (1, 1, 1), (1, 1, 1), 0, 0, [], 0)
    path = Path(b.write())
    offset = record.RECORD_LAYOUT.offset["version"]
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, offset, 99)
    path.write_bytes(bytes(data))
    with pytest.raises(record.RecordError, match=f"byte {offset}: format version 99 is not supported"):
        record.Record.load(path)
