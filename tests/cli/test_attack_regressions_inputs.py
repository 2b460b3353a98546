"""Regressions from the attack of issue 21 on what kir reads (items 4, 5, 6 and 11),
each named after its bug: option files that hung kir on a FIFO or read /dev/zero until
memory ran out (`kir tune --space`, `kir replay --all --baseline`, `--scheduler-file`,
`--storage journal:`, a Mneme recording's files), JSON nested past Python's recursion
limit or holding integers of more than 4300 digits (tracebacks), a record's metadata
that decoded into 75 times its size, and a region that repeated one deduplicated
chunk until a 4-byte read joined gigabytes. Every kir process runs with a timeout (a
hang fails the test) and, where the old behaviour was to exhaust memory, under an
address-space limit (it fails the test instead of the machine)."""
from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from attack import BASE, CS, TIMEOUT, builder, expect_exit_2, record_with, rewrite_meta
from kir import _core, hashing
from kir.errors import KirError, OptionError
from kir.record import RECORD_HEADER, Record, RecordError
from mneme_writer import kernel_ir, recording  # noqa: F401 - fixtures: a real Mneme recording

LIMIT = 3 << 30  # the address space a kir process gets where the old code read without end


def kir_limited(*args, memory: int = LIMIT, cwd=None) -> subprocess.CompletedProcess:
    """`python -m kir ARGS` with at most `memory` bytes of address space and TIMEOUT seconds."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd, preexec_fn=limit)


def one_line_error(proc: subprocess.CompletedProcess, *phrases: str) -> str:
    """Exit 2, one line on stderr: `kir: error: ...` holding every phrase."""
    stderr = expect_exit_2(proc, *phrases)
    assert len(stderr.splitlines()) == 1, stderr
    return stderr


@pytest.fixture
def kir_recording(tmp_path) -> Path:
    """A recording of one record (the C++ writer's), for the verbs that need one."""
    record_with(tmp_path / "rec", b"x" * 8, b"y" * 8)
    return tmp_path / "rec"


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


@pytest.fixture
def sparse(tmp_path) -> Path:
    """A regular file of 8 GiB that takes no disk: read whole, it exhausts memory."""
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(8 << 30)
    return path


def option_verbs(recording: Path, path: Path) -> dict[str, list]:
    """Each option that names a file kir reads, naming `path`."""
    record = next((recording / "records").glob("*.kirrec"))
    return {"--space": ["tune", "--space", path, record],
            "--baseline": ["replay", "--all", recording, "--plan", "--baseline", path],
            "--scheduler-file": ["replay", "--all", recording, "--scheduler-file", path],
            "--storage": ["tune", "--storage", f"journal:{path}", record]}


# --- item 4: option files are regular files, opened without blocking, size-capped ------

@pytest.mark.parametrize("option", ["--space", "--baseline", "--scheduler-file", "--storage"])
def test_option_file_that_is_a_fifo_is_refused_without_blocking(kir_recording, fifo, option):
    args = option_verbs(kir_recording, fifo)[option]
    one_line_error(kir_limited(*args), f"{fifo}: not a regular file (fifo)")


@pytest.mark.parametrize("option", ["--space", "--baseline", "--scheduler-file", "--storage"])
def test_option_file_that_is_dev_zero_is_refused_before_reading(kir_recording, option):
    args = option_verbs(kir_recording, Path("/dev/zero"))[option]
    one_line_error(kir_limited(*args), "/dev/zero: not a regular file (character device)")


@pytest.mark.parametrize("option", ["--space", "--baseline", "--scheduler-file"])
def test_option_json_file_larger_than_the_cap_is_refused_before_reading(kir_recording, sparse, option):
    args = option_verbs(kir_recording, sparse)[option]
    one_line_error(kir_limited(*args), f"{option} {sparse}: {8 << 30} bytes, more than the 64 MiB")


def test_option_files_that_are_fine_still_work(kir_recording, tmp_path):
    """The control: a real --baseline (a --json output) and a real --space are read."""
    first = kir_limited("replay", "--all", kir_recording, "--plan", "--json")
    assert first.returncode == 0, first.stderr
    baseline = tmp_path / "baseline.json"
    baseline.write_text(first.stdout)
    again = kir_limited("replay", "--all", kir_recording, "--plan", "--json", "--baseline", baseline)
    assert again.returncode == 0, again.stderr
    from kir.tune import Space
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"schema": "kir.tune-space/1", "preset": "quick", "opt_level": [2, 3]}))
    assert Space.load(space).opt_level == [2, 3]


def test_mneme_files_are_regular_and_capped(tmp_path):
    """A Mneme database that is a FIFO or /dev/zero (a link named <static>.json), or a
    sparse file of 8 GiB: one line each, nothing read."""
    src = tmp_path / "mneme"
    src.mkdir()
    database = src / "1.json"
    database.touch()
    refuses_fifo_and_dev_zero(database, "import-mneme", src, "-o", tmp_path / "out")
    database.unlink()
    with open(database, "wb") as f:
        f.truncate(8 << 30)
    one_line_error(kir_limited("import-mneme", src, "-o", tmp_path / "out"),
                   f"{database}: {8 << 30} bytes, more than the 64 MiB")


@pytest.mark.parametrize("which", ["prologue_file", "epilogue_file"])
def test_a_mneme_snapshot_that_is_a_fifo_or_dev_zero_is_refused(recording, tmp_path, which):
    """A real recording (test_import_mneme's generator) whose snapshot is a FIFO, then
    a link to /dev/zero."""
    src, launches = recording
    refuses_fifo_and_dev_zero(src / getattr(launches[0], which), "import-mneme", src, "-o", tmp_path / "out")


def refuses_fifo_and_dev_zero(path, *command):
    """`kir COMMAND` with the file at `path` replaced by a FIFO, then by a link to
    /dev/zero: one line naming the file and what it is, each time."""
    path.unlink()
    os.mkfifo(path)
    one_line_error(kir_limited(*command), f"{path}: not a regular file (fifo)")
    path.unlink()
    path.symlink_to("/dev/zero")
    one_line_error(kir_limited(*command), f"{path}: not a regular file (character device)")


def test_a_binary_found_by_walking_that_turns_into_a_fifo_is_skipped(tmp_path):
    """kir inspect -r reads the first bytes of each regular file it finds: opened
    without blocking, so a file replaced by a FIFO after the walk saw it is skipped."""
    from kir.commands.inputs import looks_like_binary
    path = tmp_path / "lib.so"
    path.write_bytes(b"\x7fELF" + bytes(60))
    assert looks_like_binary(str(path))
    path.unlink()
    os.mkfifo(path)
    code = f"from kir.commands.inputs import looks_like_binary; print(looks_like_binary({str(path)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.stdout == "False\n", proc.stderr


# --- item 11: JSON too deep, integers too long --------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
LONG_INT = b'{"schema": 1' + b"7" * 5000 + b"}"


@pytest.mark.parametrize("option", ["--space", "--baseline", "--scheduler-file"])
@pytest.mark.parametrize("content, phrase", [(DEEP, "nested too deeply"),
                                             (LONG_INT, "an integer of 5001 digits (at most 4300)")])
def test_option_json_too_deep_or_too_long_is_one_line(kir_recording, tmp_path, option, content, phrase):
    path = tmp_path / "option.json"
    path.write_bytes(content)
    args = option_verbs(kir_recording, path)[option]
    one_line_error(kir_limited(*args), f"{option} {path}: ", phrase)


@pytest.mark.parametrize("content, phrase", [(DEEP, "nested too deeply"),
                                             (LONG_INT, "byte 11: an integer of 5001 digits")])
def test_mneme_json_too_deep_or_too_long_is_one_line(tmp_path, content, phrase):
    src = tmp_path / "mneme"
    src.mkdir()
    (src / "1.json").write_bytes(content)
    one_line_error(kir_limited("import-mneme", src, "-o", tmp_path / "out"), f"{src / '1.json'}: ", phrase)


@pytest.mark.parametrize("content, phrase", [
    (b'{"a": 1,}', "byte 8: not JSON: Expecting property name"),
    ('{"é": [1, 2}'.encode(), "byte 12: not JSON: Expecting ',' delimiter"),  # a byte offset, not a character's
    (b'{"a": "\xff"}', "byte 7: not UTF-8"),
])
def test_json_errors_name_the_byte(tmp_path, content, phrase):
    from kir.files import load_json
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(OptionError) as error:
        load_json(path, f"--space {path}")
    assert str(error.value).startswith(f"--space {path}: {phrase}"), str(error.value)


# --- item 5: a record's metadata is bounded in values and nesting, not only bytes ----------

def body_with(record: Record, key: str, value: bytes) -> bytes:
    """The record's metadata map with one more (unknown) key, `value` raw msgpack."""
    meta = msgpack.unpackb(record.path.read_bytes()[RECORD_HEADER.size:], raw=False)
    pairs = b"".join(msgpack.packb(k) + msgpack.packb(v, use_bin_type=True) for k, v in meta.items())
    return b"\xde" + struct.pack(">H", len(meta) + 1) + pairs + msgpack.packb(key) + value


def write_body(record: Record, body: bytes) -> None:
    digest = _core.xxh3_128(body)
    record.path.write_bytes(RECORD_HEADER.pack(b"KIRRECRD", record.version, 0, len(body), digest.high, digest.low) + body)


PEAK = """
import resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "kir", *sys.argv[1:]], capture_output=True, text=True, timeout=%d)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stderr.write(proc.stderr)
""" % TIMEOUT


def peak_kib(*args) -> tuple[int, int, str]:
    """(exit status, peak resident KiB, stderr) of `kir ARGS`, measured by a parent of its own."""
    proc = subprocess.run([sys.executable, "-c", PEAK, *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT + 30)
    status, peak = map(int, proc.stdout.split())
    return status, peak, proc.stderr


EMPTY_MAPS = 16 << 20
MAX_DEPTH = 16  # kir.record.MAX_METADATA_DEPTH, as docs/record-format.md states it


def test_sixteen_megabytes_of_empty_maps_are_refused_before_decoding(kir_recording):
    """The attack's body: 16 MB of empty maps under an unknown key decoded to 1.2 GB
    (`kir records` listed the record). Refused from the value count, at the byte
    where the limit is passed, in about the memory the body itself takes."""
    record = Record.load(next((kir_recording / "records").glob("*.kirrec")))
    write_body(record, body_with(record, "junk", b"\xdd" + struct.pack(">I", EMPTY_MAPS) + b"\x80" * EMPTY_MAPS))
    size = record.path.stat().st_size - RECORD_HEADER.size
    status, peak, stderr = peak_kib("records", kir_recording)
    print(f"kir records on {size} bytes of metadata ({EMPTY_MAPS} empty maps): exit {status}, "
          f"peak {peak / 1024:.0f} MiB")
    assert status == 2, stderr
    assert f"more than {size // 3 + 65536} values" in stderr and "Traceback" not in stderr, stderr
    assert peak < 200 << 10, f"peak {peak} KiB"  # the body is 16 MiB; decoded it took 1.2 GB


def test_metadata_nested_deeper_than_the_writer_ever_nests_is_refused(kir_recording):
    record = Record.load(next((kir_recording / "records").glob("*.kirrec")))
    arrays = MAX_DEPTH - 1  # in the root map, nesting one level already
    write_body(record, body_with(record, "deep", b"\x91" * (arrays - 1) + b"\x90"))
    assert Record.load(record.path).meta["deep"] is not None  # at the limit: read
    write_body(record, body_with(record, "deep", b"\x91" * arrays + b"\x90"))
    with pytest.raises(RecordError, match=rf"containers nested deeper than {MAX_DEPTH}"):
        Record.load(record.path)
    expect_exit_2(kir_limited("records", kir_recording), f"containers nested deeper than {MAX_DEPTH}")


def test_the_densest_metadata_the_writer_makes_still_loads(tmp_path):
    """A kernel of 32764 one-byte parameters (6 values in 20 bytes each, as many as
    CUDA's parameter buffer holds), and 20000 allocations with no snapshot (13 values
    in about 72 bytes each): read as before."""
    b = builder(tmp_path / "params", params=tuple((i, 1) for i in range(32764)))
    record = Record.load(b.write())
    assert len(record.kernel.params) == len(record.launch.args) == 32764
    b = builder(tmp_path / "allocations")
    for i in range(20_000):
        b.add_allocation(BASE + i * 4096, 100 + i, "device", True)
    record = Record.load(b.write())
    assert len(record.allocations) == 20_000 and record.allocations[-1].size == 100 + 19_999


def test_measure_msgpack_counts_what_msgpack_decodes():
    """The count the limit is checked against, against msgpack's own decoding of
    values of every type (ext and timestamps included)."""
    def count(value) -> int:
        if isinstance(value, dict):
            return 1 + sum(count(k) + count(v) for k, v in value.items())
        if isinstance(value, list):
            return 1 + sum(map(count, value))
        return 1

    values = [0, -1, 1 << 63, -(1 << 63), 1.5, "x" * 300, b"y" * 70000, None, True, [], {},
              {"a": [1, {"b": [b"c", 2.0]}], "d": {}}, msgpack.ExtType(5, b"abc"), msgpack.ExtType(1, b"abcd"),
              msgpack.Timestamp(1, 2), [[[]]], list(range(1000))]
    for value in values:
        packed = msgpack.packb(value, use_bin_type=True)
        values_, depth, size = _core.measure_msgpack(packed, 1 << 20, 32)
        assert (values_, size) == (count(msgpack.unpackb(packed, raw=False, strict_map_key=False)), len(packed))
    with pytest.raises(KirError, match=r"msgpack at offset 0x2d: more than 3 values"):
        _core.measure_msgpack(msgpack.packb([1, 2, 3]), 3, 4, 42)  # the offset counts from `origin`


# --- item 6: reading a few bytes of a region reads the chunks that hold them -----------------

def test_a_slice_of_a_snapshot_reads_only_its_chunks(tmp_path):
    before, after = os.urandom(3 * CS + 100), os.urandom(3 * CS + 100)
    record = record_with(tmp_path, before, after)
    region = record.allocations[0]
    for offset, size in ((0, 4), (CS - 2, 4), (CS, CS), (100, 2 * CS + 50), (3 * CS, 100), (0, len(before)), (7, 0)):
        assert record.prologue(region, offset, size) == before[offset:offset + size]
        assert record.epilogue(region, offset, size) == after[offset:offset + size]
    assert record.prologue(region) == before
    record.chunk_path(region.prologue[0]).unlink()  # the first chunk is gone: the last is still read
    assert record.prologue(region, 3 * CS, 100) == before[3 * CS:]
    with pytest.raises(RecordError, match=f"chunk {region.prologue[0]}: missing"):
        record.prologue(region, 0, 4)
    with pytest.raises(RecordError, match=r"8 bytes at offset 12381 are not in its 12388 bytes"):
        record.prologue(region, 3 * CS + 93, 8)


def test_a_region_of_one_chunk_repeated_is_checked_chunk_by_chunk(tmp_path):
    """Each chunk must hold exactly its part of the region: a region that names a
    100-byte chunk where 4096 bytes are due is refused, whichever part is read."""
    record = record_with(tmp_path, b"a" * 100, b"b" * 100)
    name = record.allocations[0].prologue[0]

    def grow(meta):
        region = meta["allocations"][0]
        region["size"] = 2 * CS
        region["prologue"] = region["epilogue"] = [name, name]
    path = rewrite_meta(record, grow)
    grown = Record.load(path)
    with pytest.raises(RecordError, match=rf"prologue chunk #1 \({name}\) holds 100 bytes, its part of the "
                                          f"region is {CS}"):
        grown.prologue(0, CS, 4)


KERNEL_IR = """
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %p) {
  %v = load i32, ptr addrspace(1) %p
  %w = add i32 %v, 1
  store i32 %w, ptr addrspace(1) %p
  ret void
}
"""


def test_plan_of_a_jit_variant_reads_four_bytes_not_sixteen_gigabytes(tmp_path):
    """A record of `k(int* p)` (its IR made by LLVM here) whose jit_args read one i32
    through p, into a 16 GiB region that names one stored 64 MiB chunk 256 times (a
    recording of 30 kilobytes): the variant's plan reads one chunk and compiles k with
    *p = 1234. It joined the whole region (16 GiB: a MemoryError under the 3 GiB limit
    here, the OOM killer without one)."""
    llvm = pytest.importorskip("llvmlite.binding")
    chunk, repeats = 64 << 20, 256
    b = builder(tmp_path, chunk_size=chunk, params=((0, 8),))
    b.set_ir(llvm.parse_assembly(KERNEL_IR).as_bitcode())
    b.set_jit_args([(1, "array", hashing._type("i32"), False, 1, 0, 0)])  # one i32, read through argument 1
    region = b.add_allocation(BASE, chunk, "device", True)
    memory = struct.pack("<i", 1234) + bytes(chunk - 4)
    b.snapshot(region, False, memory)
    b.snapshot(region, True, memory)
    record = Record.load(b.write())

    def sixteen_gigabytes(meta):
        r = meta["allocations"][0]
        r["size"] = repeats * chunk
        r["prologue"] = r["prologue"] * repeats
        r["epilogue"] = r["epilogue"] * repeats
    path = rewrite_meta(record, sixteen_gigabytes)
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert on_disk < 64 << 10 and Record.load(path).allocations[0].size == 16 << 30
    plan = kir_limited("replay", "--plan", "--json", "--specialize", "jit", path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    variant = json.loads(plan.stdout)["variant"]
    assert variant["compile"]["specialized"]["args"] == [f"1:bytes:{struct.pack('<i', 1234).hex()}"], variant
