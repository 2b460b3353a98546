"""The C++ record writer (the code libkir_record.so writes with inside an app)
under stress, without a GPU: records stay whole when the writer is killed
mid-record, the parallel snapshot stores the same chunks as the serial one,
random corruption of a record or chunk is reported (never replayed, never a
crash), and the --reachable walk follows pointers stored in memory."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kir._core as core
from kir.errors import KirError
from kir.record import Record, RecordError, Recording

WRITER = textwrap.dedent("""
    import os, sys
    import kir._core as core
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = __import__("random").Random(seed)
    for n in range(10_000):
        b = core.RecordBuilder(directory, chunk_size=1 << 16)
        b.set_kernel("_Z1kPf", "k(float*)", core.xxh3_128(b"k%d-%d" % (seed, n)), [0], [8])
        b.set_image("cubin", "sm_90", b"\x7fELF" + rng.randbytes(1000))
        b.set_launch("cudaLaunchKernel", core.xxh3_128(b"d%d" % n), (1, 1, 1), (32, 1, 1), 0, 0,
                     [(0x1000).to_bytes(8, "little")], n)
        region = b.add_allocation(0x1000, 3 << 20, "device", True)
        data = rng.randbytes(3 << 20)
        b.snapshot(region, False, data)
        b.snapshot(region, True, data[:1 << 20] + rng.randbytes(2 << 20))
        b.write()
        print(n, flush=True)
""")


def verify(record: Record) -> None:
    """Every region's bytes, every chunk checked against its name."""
    for region in record.allocations + record.globals:
        if region.prologue is not None:
            assert len(record.prologue(region)) == region.size
            assert len(record.epilogue(region)) == region.size


def test_killed_writer_leaves_only_whole_records(tmp_path):
    """SIGKILL the writer at random moments: every visible record reads back
    whole, with all its chunks; at most temporary files ('.'-names) remain."""
    rng = random.Random(7)
    written = 0
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(attempt)],
                                stdout=subprocess.PIPE, text=True)
        for _ in range(rng.randint(1, 3)):
            written += bool(proc.stdout.readline())  # a few records written
        time.sleep(rng.uniform(0, 0.05))  # then die somewhere inside the next one
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    records = Recording(tmp_path).records()
    assert len(records) >= written >= 4
    for record in records:
        verify(record)
    names = os.listdir(tmp_path / "records") + os.listdir(tmp_path / "chunks")
    assert all(n.endswith((".kirrec", ".kirc")) or n.startswith(".") for n in names)


def test_parallel_snapshot_stores_what_the_serial_one_does(tmp_path):
    rng = random.Random(3)
    data = rng.randbytes(5 << 20) + bytes(3 << 20)  # noise, then zeros
    names = []
    for threads in (1, 8):
        b = core.RecordBuilder(str(tmp_path / str(threads)), chunk_size=1 << 20)
        region = b.add_allocation(0x10000, len(data), "device", True)
        b.snapshot(region, False, data, threads=threads)
        b.snapshot(region, True, data, threads=threads)
        import msgpack
        meta = msgpack.unpackb(b.metadata())
        names.append(meta["allocations"][0]["prologue"])
        assert meta["allocations"][0]["epilogue"] == meta["allocations"][0]["prologue"]
        assert b.stored_chunks == 6  # 5 noise chunks + one zero chunk, stored once each
    assert names[0] == names[1]
    assert names[0][:5] == [str(core.xxh3_128(data[i << 20:(i + 1) << 20])) for i in range(5)]


def test_snapshot_parts_must_fit_the_region(tmp_path):
    b = core.RecordBuilder(str(tmp_path), chunk_size=4096)
    region = b.add_allocation(0x1000, 10000, "device", True)
    with pytest.raises(KirError, match="does not fit"):
        b.snapshot(region, False, bytes(8192), offset=4096)  # runs past the end
    with pytest.raises(KirError, match="does not fit"):
        b.snapshot(region, False, bytes(10), offset=100)  # not at a chunk boundary
    with pytest.raises(KirError, match="no region #7"):
        b.snapshot(7, False, b"")
    with pytest.raises(KirError, match="ends inside a chunk"):
        b.snapshot(region, False, bytes(3))  # short of the region's end, off a chunk boundary
    b.snapshot(region, False, bytes(4096))  # the first chunk only: the record is incomplete
    with pytest.raises(KirError, match=r"record not written: region #0 at 0x1000: has a prologue but no epilogue"):
        b.write()
    b.snapshot(region, True, bytes(10000))
    with pytest.raises(KirError, match=r"region #0 at 0x1000: the prologue covers 1 of its 3 chunks"):
        b.write()
    b.snapshot(region, False, bytes(10000 - 4096), offset=4096)
    assert Path(b.write()).exists()


def one_record(directory: Path, seed: int = 1) -> Path:
    rng = random.Random(seed)
    b = core.RecordBuilder(str(directory), chunk_size=4096)
    b.set_kernel("_Z1kPf", "k(float*)", core.xxh3_128(b"k"), [0], [8])
    b.set_image("cubin", "sm_90", rng.randbytes(3000))
    b.set_launch("cudaLaunchKernel", core.xxh3_128(b"d"), (2, 1, 1), (64, 1, 1), 0, 0,
                 [(0x1000).to_bytes(8, "little")], 0)
    region = b.add_allocation(0x1000, 10000, "device", True)
    data = rng.randbytes(10000)
    b.snapshot(region, False, data)
    b.snapshot(region, True, data[::-1])
    return Path(b.write())


def test_random_corruption_is_always_reported(tmp_path):
    """600 random byte flips and truncations of the record file or one of its
    chunks: each read either succeeds with identical bytes (the flip hit
    nothing that matters — impossible here, everything is checksummed) or
    raises RecordError naming the file."""
    path = one_record(tmp_path)
    chunks = sorted((tmp_path / "chunks").iterdir())
    originals = {p: p.read_bytes() for p in [path, *chunks]}
    rng = random.Random(11)
    for trial in range(600):
        victim = rng.choice(list(originals))
        data = bytearray(originals[victim])
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
        else:
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(data))
        try:
            with pytest.raises(RecordError) as caught:
                record = Record.load(path)
                verify(record)
                record.chunk(record.kernel.image.chunk)
            assert victim.name[:8] in str(caught.value) or victim.name in str(caught.value)
        finally:
            victim.write_bytes(originals[victim])


def word(value: int) -> bytes:
    return value.to_bytes(8, "little")


def test_reachability_walk_follows_stored_pointers():
    """A synthetic memory image: an array of pointers (A) to two tables (B, C),
    a linked list D -> E -> F whose `next` fields are stored pointers, and a
    region nothing points to (G). Roots: A and D. Misaligned and interior
    pointers behave as on the device: only 8-byte-aligned words count, and a
    pointer into the middle of a region reaches it."""
    A, B, C, D, E, F, G = (0x7000_0000 + i * 0x1000 for i in range(7))
    ranges = [(G, 64), (A, 16), (B, 32), (C, 32), (D, 16), (E, 16), (F, 16)]
    contents = {
        A: word(B) + word(C + 8),          # an interior pointer still reaches C
        B: bytes(32),
        C: b"\x01" + word(G) + bytes(23),  # misaligned: does not reach G
        D: word(0) + word(E),              # node: value, next
        E: word(1) + word(F),
        F: word(2) + word(D),              # a cycle back to D
        G: bytes(64),
    }
    order = [c for c, _ in ranges]
    got = core.reachable_ranges(ranges, [A, D], [contents[a] for a in order])
    assert sorted(order[i] for i in got) == sorted([A, B, C, D, E, F])
    assert core.reachable_ranges(ranges, [0x1234], [contents[a] for a in order]) == []
    assert [order[i] for i in core.reachable_ranges(ranges, [G + 63], [contents[a] for a in order])] == [G]


def test_reachability_walk_agrees_with_a_python_walk():
    """Random graphs of regions holding random words, some of them pointers."""
    rng = random.Random(5)
    for trial in range(50):
        n = rng.randint(1, 30)
        bases = sorted(rng.sample(range(1, 1000), n))
        ranges = [(b * 0x1000, rng.randint(1, 64) * 8) for b in bases]
        contents = []
        for _, size in ranges:
            words = []
            for _ in range(size // 8):
                if rng.random() < 0.1:
                    target, tsize = rng.choice(ranges)
                    words.append(word(target + rng.randrange(tsize)))
                else:
                    words.append(word(rng.getrandbits(64)))
            contents.append(b"".join(words))
        roots = [rng.choice(ranges)[0] for _ in range(rng.randint(0, 3))]

        def holder(value, ranges=ranges):
            for i, (a, s) in enumerate(ranges):
                if a <= value < a + s:
                    return i
            return None

        seen, todo = set(), [i for i in map(holder, roots) if i is not None]
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            for at in range(0, len(contents[i]) - 7, 8):
                j = holder(int.from_bytes(contents[i][at:at + 8], "little"))
                if j is not None:
                    todo.append(j)
        assert core.reachable_ranges(ranges, roots, contents) == sorted(seen)


def test_builder_writes_a_tolerance(tmp_path):
    """RecordBuilder.set_tolerance (what kir import-mneme writes Mneme's annotations
    with): the allocation's `tolerance` reads back as kir_record_annotate's recorder
    writes it; what kir_record_annotate refuses (libkir/hook/exports.cpp) is refused,
    naming the value, and a global or a region that does not exist is not an allocation."""
    b = core.RecordBuilder(str(tmp_path))
    b.set_kernel("_Z1kPf", "k(float*)", core.xxh3_128(b"k"), [0], [8])
    b.set_launch("cudaLaunchKernel", core.xxh3_128(b"d"), (1, 1, 1), (32, 1, 1), 0, 0,
                 [(0x1000).to_bytes(8, "little")], 0)
    region = b.add_allocation(0x1000, 64, "device", True)
    other = b.add_allocation(0x2000, 64, "device", True)
    glob = b.add_global("g", 0x3000, 8)
    for r in (region, other, glob):
        size = 8 if r == glob else 64
        b.snapshot(r, False, bytes(size))
        b.snapshot(r, True, bytes(size))
    for args, message in (((region, "int32", "abs", 1.0), "tolerance dtype 'int32': expected one of float16, "
                                                          "bfloat16, float32, float64"),
                          ((region, "float32", "per-element", 1.0), "tolerance kind 'per-element'"),
                          ((region, "float32", "abs", 1.0, "none"), "tolerance norm 'none'"),
                          ((region, "float32", "abs", -1.0), "expected 0 to 1e300"),
                          ((region, "float32", "abs", float("nan")), "expected 0 to 1e300"),
                          ((region, "float32", "ulp", 2.5), "expected a whole number of ulps")):
        with pytest.raises(ValueError, match=message):
            b.set_tolerance(*args)
    for bad in (glob, 99):
        with pytest.raises(IndexError, match=f"region {bad} is not an allocation"):
            b.set_tolerance(bad, "float32", "abs", 1.0)
    b.set_tolerance(region, "float64", "rel", 1e-6, "l2", "out")
    record = Record.load(b.write())
    by_address = {r.address: r for r in record.allocations}
    assert by_address[0x1000].tolerance == {"dtype": "float64", "kind": "rel", "threshold": 1e-6, "norm": "l2",
                                            "tag": "out"}
    assert by_address[0x2000].tolerance is None
