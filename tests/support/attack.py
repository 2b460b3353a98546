"""Shared pieces of the attack regressions: `kir` run with a timeout, the exit-2 contract of bad
input, and records built and rewritten by hand (tests/*/test_attack_regressions*.py)."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import msgpack

from kir import _core
from kir.record import RECORD_HEADER, Record

CS = 4096
BASE = 0x7F00_0000_0000
TIMEOUT = 60  # every verb here must answer long before this: a hang fails the test


def kir_run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)


def expect_exit_2(proc: subprocess.CompletedProcess, *phrases: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stderr.startswith("kir: error: ") and "Traceback" not in proc.stderr, proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, (phrase, proc.stderr)
    return proc.stderr


def builder(directory, chunk_size=CS, params=((0, 8),), grid=(2, 1, 1)):
    b = _core.RecordBuilder(str(directory), chunk_size)
    static = _core.static_hash("k", "cubin", [b"image"])
    b.set_process(1234, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel("k", "k(int*)", static, [o for o, _ in params], [s for _, s in params])
    b.set_image("cubin", "sm_90", b"image")
    b.set_launch("cudaLaunchKernel", static, grid, (128, 1, 1), 0, 0,
                 [struct.pack("<Q", BASE)[:s] for _, s in params], 0)
    b.set_va_range(BASE, 1 << 30)
    return b


def record_with(directory, before: bytes, after: bytes, chunk_size=CS) -> Record:
    b = builder(directory, chunk_size)
    region = b.add_allocation(BASE, len(before), "device", True)
    b.snapshot(region, False, before)
    b.snapshot(region, True, after)
    return Record.load(b.write())


def rewrite_meta(record: Record, change) -> Path:
    """The record's metadata changed by `change(meta)`, written back with a correct header."""
    meta = msgpack.unpackb(record.path.read_bytes()[RECORD_HEADER.size:], raw=False)
    change(meta)
    body = msgpack.packb(meta, use_bin_type=True)
    digest = _core.xxh3_128(body)
    record.path.write_bytes(RECORD_HEADER.pack(b"KIRRECRD", record.version, 0, len(body), digest.high, digest.low) + body)
    return record.path
