"""The recorder's device-to-record copy (libkir/recorder/snapshot.cpp) without a
GPU: tests/native/cpp/snapshot_test.cpp drives the real Snapshotter with a driver whose
device memory is host memory (each asynchronous copy made by a thread of its
own), so the pipeline — two staging buffers refilled while a pool of
writer threads stores the previous batches' chunks (issue 15) — is checked here
against the bytes computed again, for several thread counts and staging sizes,
and its failures: a device copy that fails and a chunk store that cannot write
must each be reported, with nothing hanging and no record written."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kir.record import Recording
from running import native_test_program


def sizes(chunk: int) -> tuple[int, int, int]:
    return 73 * chunk + 1, chunk, 0  # snapshot_test.cpp's regions


@pytest.fixture(scope="module")
def program() -> Path:
    return native_test_program("kir_snapshot_test")


def contents(region: int, size: int, after: bool) -> bytes:
    """snapshot_test.cpp's byte i of `region`: (i * (2r + 3) + r (+1 after) + (i >> 8)
    + 7 * (i >> 20)) & 0xff, built 256 bytes at a time (block j adds j + 7 * (j >> 12))."""
    base = bytes((i * (2 * region + 3) + region + after) & 0xFF for i in range(256))
    shifted = [base.translate(bytes((v + k) & 0xFF for v in range(256))) for k in range(256)]
    blocks = (size + 255) // 256
    return b"".join(shifted[(j + 7 * (j >> 12)) & 0xFF] for j in range(blocks))[:size]


def run(program: Path, directory: Path, threads: int, staging_chunks: int, chunk: int = 4096,
        mode: str = "") -> str:
    proc = subprocess.run([str(program), str(directory), str(threads), str(staging_chunks), str(chunk),
                           *([mode] if mode else [])], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("threads,staging_chunks,chunk", [(1, 1, 4096), (1, 4, 4096), (3, 2, 4096), (8, 5, 4096),
                                                           (16, 64, 4096), (2, 2, 1 << 20), (4, 3, 1 << 20)])
def test_every_chunk_is_stored_from_the_batch_it_belongs_to(program, tmp_path, threads, staging_chunks, chunk):
    """Small chunks (many batches, many files) and 1 MiB ones (a chunk takes its
    writer longer than the next batch's copy: a staging buffer refilled too early
    would show as another batch's bytes in the record)."""
    out = run(program, tmp_path, threads, staging_chunks, chunk)
    assert out.startswith("written "), out
    [record] = list(Recording(tmp_path).records())
    record.check()  # every chunk read back and its checksum verified
    for region, size in enumerate(sizes(chunk)):
        assert record.prologue(region) == contents(region, size, False), region
        assert record.epilogue(region) == contents(region, size, True), region


@pytest.mark.parametrize("copy", [1, 3, 40])
def test_a_failed_device_copy_is_reported_and_nothing_is_written(program, tmp_path, copy):
    out = run(program, tmp_path, 4, 3, mode=f"copy-{copy}")
    assert out.startswith("failed: copying ") and out.endswith("to the host failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)")
    assert list((tmp_path / "records").iterdir()) == []


def test_a_chunk_that_cannot_be_written_is_reported(program, tmp_path):
    out = run(program, tmp_path, 4, 3, mode="store")
    assert out.startswith("failed: ") and "cannot create: Not a directory" in out
    assert list((tmp_path / "records").iterdir()) == []
