"""Regressions from the independent attack on kir (issue 11, section 4): each test is
named after the bug it pins. Bitcode wrappers that made the splitter loop, records
trusted too much (non-regular files, sizes that reach allocations, metadata that
makes nonsense plans, chunks a plan never checked), FIFOs that hung every verb and
files that shrink after opening, names from the input that reached the file system
in `kir extract`, and recordings readable by everyone."""
from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import damage
import kir
from attack import CS, TIMEOUT, expect_exit_2, kir_run, record_with, rewrite_meta
from kir import _core
from kir.errors import KirError
from kir.record import CHUNK_LAYOUT, Record, RecordError, read_chunk

# --- 1. the bitcode splitter looped forever on a wrapper of offset 0, size 0 -------------

SEED = Path(__file__).parents[1] / "native" / "fuzz" / "seeds" / "bitcode_wrapper_offset0_size0.bin"


def object_with_llvmbc(tmp_path: Path, section: bytes) -> Path:
    """A real ELF object (clang-22) with `section` as its .llvmbc (llvm-objcopy-22)."""
    return damage.object_with_section(tmp_path, ".llvmbc", section)


def test_bitcode_wrapper_offset0_size0_does_not_loop(tmp_path):
    wrapper = SEED.read_bytes()
    assert wrapper == struct.pack("<5I", 0x0B17C0DE, 0, 0, 0, 0)  # the fuzz seed is the attack's input
    binary = object_with_llvmbc(tmp_path, wrapper)
    proc = kir_run("inspect", binary)
    expect_exit_2(proc, ".llvmbc: bitcode wrapper at offset ", "module offset 0x0",
                  "points into its own 20-byte header")
    with pytest.raises(KirError, match="points into its own 20-byte header"):
        kir.open(binary).images


@pytest.mark.parametrize("offset,size,phrase", [
    (20, 0, "module size 0x0"),            # past the header, but empty: no progress either
    (8, 4, "module offset 0x8"),           # into its own header
    (20, 1 << 20, "points past the data"),
])
def test_bitcode_wrapper_bad_fields_are_errors(tmp_path, offset, size, phrase):
    binary = object_with_llvmbc(tmp_path, struct.pack("<5I", 0x0B17C0DE, 0, offset, size, 0) + b"BC\xc0\xde")
    expect_exit_2(kir_run("inspect", binary), phrase)


# --- records written by the C++ writer --------------------------------------------------

def patch(path: Path, offset: int, data: bytes) -> None:
    content = bytearray(path.read_bytes())
    content[offset:offset + len(data)] = data
    path.write_bytes(bytes(content))


# --- 2. records trusted too much ---------------------------------------------------------

def test_replay_plan_of_dev_zero_is_refused_before_reading():
    expect_exit_2(kir_run("replay", "--plan", "/dev/zero"), "/dev/zero: not a regular file (character device)")


def test_replay_plan_of_a_directory_or_fifo_is_refused(tmp_path):
    expect_exit_2(kir_run("replay", "--plan", tmp_path), "not a regular file (directory)")
    fifo = tmp_path / "pipe.kirrec"
    os.mkfifo(fifo)
    expect_exit_2(kir_run("replay", "--plan", fifo), f"{fifo}: not a regular file (fifo)")


def test_record_body_size_beyond_the_cap_is_refused_before_reading(tmp_path):
    r = record_with(tmp_path, b"x" * 8, b"y" * 8)
    patch(r.path, 16, struct.pack("<Q", 1 << 40))  # body_size: a terabyte
    with pytest.raises(RecordError, match=r"byte 16: body_size 1099511627776 is more than the cap"):
        Record.load(r.path)


def test_zstd_bomb_chunk_is_refused_before_decoding(tmp_path):
    """A chunk file of a few KiB whose zstd frame decodes to 16 MiB, named by a record
    whose chunks hold 4 KiB: refused from the header, nothing decoded."""
    big = record_with(tmp_path / "big", bytes(16 << 20), bytes(16 << 20), chunk_size=16 << 20)
    name = big.allocations[0].prologue[0]
    bomb = big.chunk_path(name)
    assert bomb.stat().st_size < 64 << 10  # the bomb: small on disk
    h = CHUNK_LAYOUT.unpack(bomb.read_bytes())
    assert h["raw_size"] == 16 << 20 and h["codec"] == 1
    with pytest.raises(RecordError, match=rf"byte 16: raw size {16 << 20} is more than the 4096 bytes "
                                          "this chunk can hold"):
        read_chunk(bomb, name, CS)
    # planted into a 4 KiB-chunk recording under a name its record uses
    small = record_with(tmp_path / "small", b"a" * CS, b"b" * CS)
    victim = small.allocations[0].prologue[0]
    content = bytearray(bomb.read_bytes())
    digest = _core.Hash128.from_hex(victim)
    struct.pack_into("<QQ", content, CHUNK_LAYOUT.offset["hash_high"], digest.high, digest.low)
    small.chunk_path(victim).write_bytes(bytes(content))
    with pytest.raises(RecordError, match="is more than the 4096 bytes this chunk can hold"):
        small.prologue(0)
    expect_exit_2(kir_run("replay", "--plan", small.path), victim, "more than the 4096 bytes")


def test_zstd_binding_refuses_sizes_the_frame_does_not_hold(tmp_path):
    r = record_with(tmp_path, bytes(CS), bytes(CS))
    payload = r.chunk_path(r.allocations[0].prologue[0]).read_bytes()[CHUNK_LAYOUT.size:]
    assert _core.zstd_decompress(payload, CS) == bytes(CS)
    with pytest.raises(KirError, match=r"frame header says 0x1000 bytes, the claimed size is 0x180000000"):
        _core.zstd_decompress(payload, 6 << 30, 8 << 30)
    with pytest.raises(KirError, match=r"the claimed size 0x1000 is more than the cap 0x800"):
        _core.zstd_decompress(payload, CS, 2048)
    with pytest.raises(KirError, match="more than the cap 0x40000000"):  # the default cap: 1 GiB
        _core.zstd_decompress(payload, 6 << 30)


@pytest.mark.parametrize("change,phrase", [
    (lambda m: m["kernel"]["params"][0].__setitem__("offset", 1 << 32),
     "metadata 'kernel.params[0].offset' is 4294967296, expected 0 to 65536"),
    (lambda m: m["kernel"]["params"][0].__setitem__("offset", -8),
     "metadata 'kernel.params[0].offset' is -8, expected 0 to 65536"),
    (lambda m: m["kernel"]["params"][0].__setitem__("offset", 65530),
     "kernel.params[0] ends at byte 65538, past the 65536-byte cap"),
    (lambda m: m["launch"].__setitem__("grid", [-1, 1, 1]),
     "metadata 'launch.grid' is [-1, 1, 1], expected three integers from 1 to 4294967295"),
    (lambda m: m["launch"].__setitem__("block", [0, 1, 1]), "metadata 'launch.block' is [0, 1, 1]"),
    (lambda m: m["allocations"][0].__setitem__("address", -4096),
     "metadata 'allocations[0].address' is -4096, expected 0 to"),
    (lambda m: m["allocations"][0].__setitem__("address", (1 << 64) - 4),
     "8 bytes run past the end of the address space"),
    (lambda m: m.__setitem__("chunk_size", 1 << 40), "metadata 'chunk_size' is 1099511627776, expected 1 to"),
    (lambda m: m["kernel"]["image"].__setitem__("size", 1 << 40), "metadata 'kernel.image.size' is"),
    (lambda m: m["launch"].__setitem__("shared_bytes", -1), "metadata 'launch.shared_bytes' is -1"),
])
def test_metadata_sizes_and_offsets_are_bounded(tmp_path, change, phrase):
    r = record_with(tmp_path, b"x" * 8, b"y" * 8)
    path = rewrite_meta(r, change)
    with pytest.raises(RecordError) as error:
        Record.load(path)
    assert phrase in str(error.value), str(error.value)
    expect_exit_2(kir_run("replay", "--plan", path), phrase)


def test_replay_plan_and_records_check_every_chunk_not_only_the_image(tmp_path):
    r = record_with(tmp_path, b"p" * (CS + 10), b"q" * (CS + 10))
    plan = kir_run("replay", "--plan", r.path)
    assert plan.returncode == 0, plan.stderr  # the hashes differ (a made-up image): a warning, exit 0
    listed = kir_run("records", "--json", tmp_path)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["records"]) == 1
    epilogue = r.allocations[0].epilogue[1]  # the last chunk of the epilogue: only a replay reads it
    path = r.chunk_path(epilogue)
    content = path.read_bytes()
    patch(path, len(content) - 1, bytes([content[-1] ^ 1]))
    expect_exit_2(kir_run("replay", "--plan", r.path), f"chunk {epilogue}: hash of the decoded bytes")
    listed = kir_run("records", "--json", tmp_path)
    assert listed.returncode == 2 and json.loads(listed.stdout)["records"] == []
    assert f"chunk {epilogue}: hash of the decoded bytes" in listed.stderr
    path.unlink()
    expect_exit_2(kir_run("replay", "--plan", r.path), f"chunk {epilogue}: missing")
    expect_exit_2(kir_run("records", tmp_path), f"chunk {epilogue}: missing")


def test_a_chunk_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    r = record_with(tmp_path, b"x" * 8, b"y" * 8)
    name = r.allocations[0].prologue[0]
    r.chunk_path(name).unlink()
    os.mkfifo(r.chunk_path(name))
    with pytest.raises(RecordError, match=rf"chunk {name}: not a regular file \(fifo\)"):
        r.check()
    expect_exit_2(kir_run("records", tmp_path), "not a regular file (fifo)")


# --- 3. FIFOs hung every verb; a file shrinking after open raised SIGBUS -----------------

@pytest.mark.parametrize("verb", [["inspect"], ["inspect", "--scan"], ["hash"], ["extract", "-o", "out"]])
def test_fifo_does_not_hang(tmp_path, verb):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = [a if a != "out" else str(tmp_path / "out") for a in verb]
    expect_exit_2(kir_run(*args, fifo), f"{fifo}: not a regular file (fifo)")


TRUNCATE_THEN_DECODE = """
import os, sys, kir
path = sys.argv[1]
binary = kir.open(path)             # opened: the file is read or mapped now
os.truncate(path, 0)                # another process empties it before anything is decoded
images = [(i.kind.name, i.target, len(i.read()), [k.name for k in i.kernels])
          for i in binary.images if not i.obfuscated]
print(repr(images))
"""


def test_file_truncated_after_open_is_no_sigbus(tmp_path, built):
    source = built["kernels.fatbin"]
    assert source.stat().st_size <= 64 << 20  # copied at open (MappedFile::kCopyLimit)
    expected = [(i.kind.name, i.target, len(i.read()), [k.name for k in i.kernels])
                for i in kir.open(source).images if not i.obfuscated]
    assert len(expected) >= 2 and all(n > 0 for _, _, n, _ in expected)
    victim = tmp_path / "victim.fatbin"
    shutil.copyfile(source, victim)
    proc = subprocess.run([sys.executable, "-c", TRUNCATE_THEN_DECODE, victim], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -7 was SIGBUS
    assert victim.stat().st_size == 0
    assert proc.stdout.strip() == repr(expected)  # decoded from the bytes as they were at open


# --- 4. untrusted names reached the file system in kir extract ---------------------------

def bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """A clang offload bundle by its documented layout: magic, entry count, then per
    entry (offset, size, id length, id), then the entries' bytes."""
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    table_size = len(header) + sum(24 + len(i.encode()) for i, _ in entries)
    table, data, at = b"", b"", table_size
    for ident, payload in entries:
        table += struct.pack("<QQQ", at, len(payload), len(ident.encode())) + ident.encode()
        data += payload
        at += len(payload)
    return header + table + data


@pytest.fixture(scope="module")
def bitcode_module() -> bytes:
    llvm = pytest.importorskip("llvmlite.binding")
    module = llvm.parse_assembly('target triple = "amdgcn-amd-amdhsa"\ndefine void @f() {\n  ret void\n}\n')
    return module.as_bitcode()


def test_extract_names_from_the_input_cannot_escape_or_split(tmp_path, bitcode_module):
    evil = "hip-amdgcn-amd-amdhsa--../../../escaped\nINJECTED"
    binary = tmp_path / "crafted.bundle"
    binary.write_bytes(bundle([("host-x86_64-unknown-linux-gnu-", b""), (evil, bitcode_module)]))
    images = kir.open(binary).images
    assert any("../" in i.target for i in images), [i.target for i in images]  # kir reports the id as is
    out = tmp_path / "out"
    out.mkdir()
    (out / "crafted.1...").mkdir()  # the subdirectory the unsanitized name would have walked through
    proc = kir_run("extract", "-o", out, "--kind", "bitcode", binary)
    assert proc.returncode == 0, proc.stderr
    written = proc.stdout.splitlines()
    assert written == [str(out / "crafted.1.______escaped_INJECTED.bc")]  # one line, one file
    assert (out / "crafted.1.______escaped_INJECTED.bc").read_bytes() == bitcode_module
    assert sorted(p.name for p in out.iterdir()) == ["crafted.1...", "crafted.1.______escaped_INJECTED.bc"]
    assert not list((out / "crafted.1...").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted.bundle", "out"]  # nothing escaped


def test_extract_does_not_follow_a_planted_symlink(tmp_path, built):
    source = built["kernels.fatbin"]
    out = tmp_path / "out"
    first = kir_run("extract", "-o", out, source)
    assert first.returncode == 0, first.stderr
    name = Path(first.stdout.splitlines()[0])
    target = tmp_path / "precious"
    target.write_text("keep me")
    name.unlink()
    name.symlink_to(target)
    again = kir_run("extract", "-o", out, source)
    assert again.returncode == 0, again.stderr
    assert target.read_text() == "keep me"  # the link was replaced, not written through
    assert not name.is_symlink() and name.stat().st_size > 0


# --- 5. recordings were world-readable; -o accepted any path -----------------------------

def test_record_files_are_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        r = record_with(tmp_path / "rec", os.urandom(CS + 1), bytes(CS + 1))
    finally:
        os.umask(old)
    directory = tmp_path / "rec"
    for d in (directory, directory / "chunks", directory / "records"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    files = [r.path, *(directory / "chunks").iterdir()]
    assert len(files) >= 4
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    leftovers = [p for d in ("chunks", "records") for p in (directory / d).iterdir() if p.name.startswith(".")]
    assert leftovers == []  # temporaries renamed or removed


def test_record_writer_refuses_a_file_or_a_foreign_directory(tmp_path):
    regular = tmp_path / "passwd"
    regular.write_text("root:x:0:0\n")
    with pytest.raises(KirError, match=f"{regular}: exists and is not a directory"):
        _core.RecordBuilder(str(regular), CS)
    assert regular.read_text() == "root:x:0:0\n"
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(KirError, match="exists and is not a kir recording"):
        _core.RecordBuilder(str(foreign), CS)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    record_with(tmp_path / "again", b"x", b"y")
    record_with(tmp_path / "again", b"z", b"w")  # an existing recording is added to


@pytest.mark.parametrize("kind", ["file", "foreign directory"])
def test_record_output_that_is_not_a_recording_exits_2_before_the_app_runs(tmp_path, kind):
    output = tmp_path / "target"
    if kind == "file":
        output.write_text("precious\n")
        phrase = "exists and is not a directory"
    else:
        output.mkdir()
        (output / "precious").write_text("precious\n")
        phrase = "exists and is not a kir recording"
    marker = tmp_path / "ran"
    proc = kir_run("record", "-o", output, "--", "touch", marker)
    expect_exit_2(proc, f"{output}: {phrase}")
    assert not marker.exists()
    from kir.errors import OptionError
    from kir.record import record_app
    with pytest.raises(OptionError, match=phrase):
        record_app(["touch", marker], output)
    assert not marker.exists()
