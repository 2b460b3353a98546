"""Bad input: a precise error (file, container, byte offset) and exit status 2;
never a crash, hang or traceback."""
from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

import kir
from kir import report


def expect_error(kir_cli, path, *phrases, args=("inspect",)):
    result = kir_cli(*args, path)
    assert result.returncode == 2, (result.stdout[-500:], result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("kir: error: "), result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, (phrase, result.stderr)
    return result.stderr


def section_offset(path: Path, name: str) -> int:
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(name)["sh_offset"]


def first_container(path: Path) -> tuple[int, int]:
    """(file offset, total size) of the first container, read with pyelftools and struct."""
    with open(path, "rb") as f:
        data = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    _, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    return section_offset(path, ".nv_fatbin"), header + size


def mutated(tmp_path: Path, source: Path, offset: int, fmt: str, value) -> Path:
    data = bytearray(source.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    out = tmp_path / f"{source.name}.mut"
    out.write_bytes(bytes(data))
    return out


def entry_offsets(path: Path, container: int = 1) -> list[int]:
    """File offsets of the entry headers of one container (from kir's own parse)."""
    site = kir.open(path).containers[container].site
    return [site.file_offset + i.fatbin.offset for i in site.images]


# --- files that are not binaries at all -----------------------------------------------

def test_missing_file(kir_cli, tmp_path):
    expect_error(kir_cli, tmp_path / "nope", "cannot open", "No such file")


def test_directory(kir_cli, tmp_path):
    expect_error(kir_cli, tmp_path, "is a directory")


def test_empty_file(kir_cli, tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    expect_error(kir_cli, tmp_path / "empty", "empty file")


def test_text_file(kir_cli, tmp_path):
    (tmp_path / "t.txt").write_text("hello world\n")
    expect_error(kir_cli, tmp_path / "t.txt", "not an ELF file, ar archive, fatbin or offload bundle",
                 "68 65 6c 6c")


def test_random_bytes(kir_cli, tmp_path):
    rng = random.Random(1)
    (tmp_path / "r").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    expect_error(kir_cli, tmp_path / "r", "not an ELF file")


def test_elf32_is_refused(kir_cli, built, tmp_path):
    bad = mutated(tmp_path, built["app"], 4, "<B", 1)
    expect_error(kir_cli, bad, "unsupported ELF class 1 at offset 0x4")


def test_section_table_past_end(kir_cli, built, tmp_path):
    size = built["app"].stat().st_size
    bad = mutated(tmp_path, built["app"], 0x28, "<Q", size + 64)
    expect_error(kir_cli, bad, f"section header table at offset {hex(size + 64)}")


# --- truncation ----------------------------------------------------------------------

def boundaries(path: Path) -> list[int]:
    """Every container and entry boundary of a bare fatbin: header ends, payload ends."""
    site = kir.open(path).containers[0].site
    points = {site.file_offset + 16, site.file_offset + site.size}
    for e in (i.fatbin for i in site.images):
        start = site.file_offset + e.offset
        points |= {start, start + e.header_size, start + e.header_size + e.payload_size}
    return sorted(points)


def test_truncated_fatbin_at_every_boundary(kir_cli, built, tmp_path):
    source = built["kernels.fatbin"].read_bytes()
    for point in boundaries(built["kernels.fatbin"]):
        for cut in (point - 1, point, point + 1):
            if not 0 < cut < len(source):
                continue
            bad = tmp_path / f"cut{cut}.fatbin"
            bad.write_bytes(source[:cut])
            message = expect_error(kir_cli, bad, str(bad))
            assert "offset 0x" in message, message
            bad.unlink()


def test_truncated_cubin_file(kir_cli, built, tmp_path):
    """A bare cubin cut short is a bad ELF file, said at file level, not an image."""
    source = built["kernels_sm90.cubin"].read_bytes()
    for cut in (4, 20, 63, 64, len(source) // 2, len(source) - 1):
        bad = tmp_path / f"cut{cut}.cubin"
        bad.write_bytes(source[:cut])
        message = expect_error(kir_cli, bad, str(bad), "ELF")
        assert "0x" in message, message


def test_truncated_executable(kir_cli, built, tmp_path):
    """Cut inside .nv_fatbin: the section table (at the end) is gone, and kir says so."""
    offset, size = first_container(built["app"])
    bad = tmp_path / "app.cut"
    bad.write_bytes(built["app"].read_bytes()[: offset + size // 2])
    expect_error(kir_cli, bad, "section header table at offset",
                 f"lies past the end of the file (size {hex(offset + size // 2)})")


# --- header fields mutated -------------------------------------------------------------

@pytest.mark.parametrize("field,fmt,value,phrase", [
    (0, "<I", 0x12345678, "expected fatbin container magic 0xba55ed50, found 0x12345678"),
    (4, "<H", 7, "unsupported fatbin container version 7"),
    (6, "<H", 3, "fatbin container header size 3"),
    (8, "<Q", 1 << 60, "runs past the end of its section"),
])
def test_container_header_mutations(kir_cli, built, tmp_path, field, fmt, value, phrase):
    offset, _ = first_container(built["app"])
    bad = mutated(tmp_path, built["app"], offset + field, fmt, value)
    message = expect_error(kir_cli, bad, phrase, ".nv_fatbin: container #0 at file offset " + hex(offset))
    if field:
        assert hex(offset + field) in message


@pytest.mark.parametrize("field,fmt,value,phrase", [
    (0x04, "<I", 0, "header size 0x0"),
    (0x04, "<I", 1 << 30, "header size 0x40000000"),
    (0x08, "<Q", 1 << 62, "payload size 0x4000000000000000"),
    (0x10, "<I", 0xFFFFFFF0, "exceeds the payload size"),
])
def test_entry_header_mutations(kir_cli, built, tmp_path, field, fmt, value, phrase):
    entry = entry_offsets(built["app"])[1]
    bad = mutated(tmp_path, built["app"], entry + field, fmt, value)
    expect_error(kir_cli, bad, phrase, f"entry #1 at file offset {hex(entry)}")


def compressed_entry(path: Path) -> tuple[int, object]:
    b = kir.open(path)
    for image in b.images:
        if image.compression == "zstd" and not image.obfuscated:
            return image.container.file_offset + image.entry.offset, image
    raise AssertionError("no compressed image")


def test_decompression_bomb_is_refused(kir_cli, built, tmp_path):
    entry, _ = compressed_entry(built["app_compress_all"])
    bad = mutated(tmp_path, built["app_compress_all"], entry + 0x38, "<Q", 1 << 40)
    expect_error(kir_cli, bad, "claimed uncompressed size 0x10000000000 exceeds the limit",
                 args=("inspect", "--kernels"))


def test_wrong_uncompressed_size(kir_cli, built, tmp_path):
    entry, image = compressed_entry(built["app_compress_all"])
    bad = mutated(tmp_path, built["app_compress_all"], entry + 0x38, "<Q", image.size + 8)
    expect_error(kir_cli, bad, "zstd", "payload at file offset", args=("inspect", "--kernels"))


def test_corrupt_compressed_payload(kir_cli, built, tmp_path):
    entry, image = compressed_entry(built["app_compress_all"])
    payload = image.entry.payload_file_offset
    data = bytearray(built["app_compress_all"].read_bytes())
    for i in range(4, min(64, image.stored_size)):
        data[payload + i] ^= 0xA5
    bad = tmp_path / "corrupt"
    bad.write_bytes(bytes(data))
    expect_error(kir_cli, bad, "zstd", hex(payload), args=("inspect", "--kernels"))


def test_corrupt_wrapper_magic(kir_cli, built, tmp_path):
    offset = section_offset(built["app"], ".nvFatBinSegment")
    bad = mutated(tmp_path, built["app"], offset, "<I", 0xDEADBEEF)
    expect_error(kir_cli, bad, f"wrapper at file offset {hex(offset)}", "found 0xdeadbeef")


def test_corrupt_cubin_inside_is_reported_with_its_image(kir_cli, built, tmp_path):
    b = kir.open(built["app_compress_none"])
    image = next(i for i in b.images if i.kind == "cubin")
    # The cubin's own e_shoff, pushed past its end.
    bad = mutated(tmp_path, built["app_compress_none"], image.entry.payload_file_offset + 0x28,
                  "<Q", 1 << 40)
    expect_error(kir_cli, bad, f"container #{image.container.index} image #{image.entry.index}",
                 "cubin: section header table", args=("inspect", "--kernels"))


# --- random mutation, in process ----------------------------------------------------

def test_random_mutations_never_crash(built, tmp_path):
    """Thousands of byte mutations of a fatbin and an executable's fatbin section:
    every one either parses or raises KirError (a crash would kill the test run)."""
    rng = random.Random(2024)
    for name in ("kernels.fatbin", "app_compress_all", "kernels_sm90.cubin"):
        source = built[name].read_bytes()
        start = first_container(built[name])[0] if name.startswith("app") else 0
        for round_ in range(300):
            data = bytearray(source)
            for _ in range(rng.randint(1, 8)):
                pos = start + rng.randrange(min(len(source) - start, 64 * 1024))
                data[pos] = rng.randrange(256)
            path = tmp_path / "m"
            path.write_bytes(bytes(data))
            try:
                binary = kir.open(str(path), scan=round_ % 2 == 0)
                binary.load_code(threads=1)
                binary._core.image_records()
                report.render_table(binary, codes=[i._code for i in binary.images])
            except kir.KirError as error:
                assert str(error)
