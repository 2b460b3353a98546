"""The record fuzzer's pieces: one recording written by the C++ writer and read back the way
every reader does (also benchmarks/fuzz_python.py's seed), and the byte mutations the record and
Mneme fuzz tests apply."""
from __future__ import annotations

import struct
from pathlib import Path

from kir import _core
from kir.record import Record, Recording

CS = 4096
BASE = 0x7F00_0000_0000


def write_recording(directory: Path) -> tuple[Path, list[Path]]:
    """(record file, chunk files) of one record with code, PTX, IR, two allocations
    spanning several chunks, a global and flags (also benchmarks/fuzz_python.py's seed)."""
    static = _core.static_hash("_Z1kPfi", "cubin", [b"\x7fELF-image"])
    b = _core.RecordBuilder(str(directory), CS)
    b.set_process(4321, 0)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel("_Z1kPfi", "k(float*, int)", static, [0, 8], [8, 4])
    b.set_image("cubin", "sm_90", b"\x7fELF-image")
    b.set_ptx("sm_90", b".version 8.0\n.target sm_90\n")
    b.set_ir(b"BC\xc0\xde-module")
    b.set_launch("cuLaunchKernel", static, (3, 2, 1), (64, 4, 2), 1024, 0xABCD,
                 [struct.pack("<Q", BASE), b"\x05\0\0\0"], 1)
    b.set_va_range(BASE, 1 << 34)
    for i, size in enumerate((3 * CS + 5, 100)):
        region = b.add_allocation(BASE + i * (1 << 20), size, "device", True)
        b.snapshot(region, False, bytes((j * 7 + i) & 0xFF for j in range(size)))
        b.snapshot(region, True, bytes((j * 13 + i) & 0xFF for j in range(size)))
    g = b.add_global("table", 0xDEAD0000, 256)
    b.snapshot(g, False, bytes(range(256)))
    b.snapshot(g, True, bytes(reversed(range(256))))
    b.add_flag("host-pointer", "argument 3")
    path = Path(b.write())
    chunks = sorted(Recording(directory).chunk_paths)
    return path, chunks


def read_everything(path: Path) -> None:
    """What `kir records` and `kir replay --plan` read of a record."""
    record = Record.load(path)
    record.check()
    for region in record.regions:
        if region.snapshotted:
            record.prologue(region)
            record.epilogue(region)
            record.changed_ranges(region)
    for which in ("image", "ptx", "ir"):
        if getattr(record.kernel, which) is not None:
            record.code(which)


def mutate(data: bytes, mutations, fields: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for op, at, value in mutations:
        if op == "field":
            if not fields:
                continue
            offset, size = fields[at % len(fields)]
            if offset + size <= len(out):
                out[offset:offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
            continue
        at = at % (len(out) + 1)
        if op == "set":
            out[at:at + len(value)] = value
        elif op == "insert":
            out[at:at] = value
        elif op == "delete":
            del out[at:at + value]
        elif op == "u64":  # a u64 anywhere (tests/record/test_import_mneme.py: Mneme's lengths, sizes, addresses)
            out[at:at + 8] = value.to_bytes(8, "little")
        else:
            del out[at:]
    return bytes(out)


def fuzz_folder(source: Path, files: list[str], convert, error: type, examples: int, mutation) -> dict[str, int]:
    """A recording folder of another tool (Mneme's, libomptarget's) fuzzed: one of `files`
    in a copy of `source` mutated at random (hypothesis, fixed seed, `examples` examples,
    `mutation` the strategy of one mutation, up to 6 of them), then read as the importer's
    --check does, `convert(copy, out, write=False)`: a conversion, or `error` naming the
    copy — never another exception. The counts {"read", "refused"}."""
    import shutil
    import tempfile

    from hypothesis import HealthCheck, given, settings, strategies as st
    outcomes = {"read": 0, "refused": 0}

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(target=st.sampled_from(files), mutations=st.lists(mutation, min_size=1, max_size=6))
    def damaged(target, mutations):
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / source.name
            shutil.copytree(source, copy)
            (copy / target).write_bytes(mutate((source / target).read_bytes(), mutations, []))
            try:
                convert(copy, Path(scratch) / "out", write=False)
                outcomes["read"] += 1
            except error as refused:
                assert str(copy) in str(refused), refused  # names the folder or file
                outcomes["refused"] += 1

    damaged()
    return outcomes
