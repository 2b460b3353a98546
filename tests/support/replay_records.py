"""Records written by the C++ writer (kir._core.RecordBuilder) for kernels of a real
nvcc-built cubin (`make_record`). Shared by the replay-all, progress, API and optional-dependency tests."""
from __future__ import annotations

import random
from pathlib import Path

import hash_reference as ref
import kir
from kir import _core
from kir.record import Record

BASE = 0x7F00_0000_0000
CS = 4096


# Kernels of kernels_sm90.cubin (tests/fixtures/kernels.cu), one record each.
KERNELS = ["_Z4axpyfPKfPfi", "_Z7boundedPf", "_Z9clusteredPf", "_Z9no_paramsv"]


def make_record(directory: Path, cubin: Path, name: str, grid=(4, 1, 1), block=(128, 1, 1), seed: int = 0) -> Record:
    """A record of kernel `name` from the real cubin, hashed as the hook hashes a
    launch (tests/support/hash_reference.py), with one 8 KiB allocation its first pointer
    argument points to."""
    image = cubin.read_bytes()
    [kernel] = [k for i in kir.open(cubin).images for k in i.kernels if k.name == name]
    args = [(BASE if p.size == 8 else seed).to_bytes(p.size, "little") for p in kernel.params]
    static = _core.static_hash(name, "cubin", [image])
    identity = ref.launch_identity(str(static), "sm_90", args, list(grid), list(block), 0)
    b = _core.RecordBuilder(str(directory), CS)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(name, kir.demangle(name), static, [p.offset for p in kernel.params], [p.size for p in kernel.params])
    b.set_image("cubin", "sm_90", image)
    b.set_launch("cudaLaunchKernel", _core.Hash128.from_hex(identity), grid, block, 0, 0, args, 0)
    b.set_va_range(BASE, 1 << 30)
    before = random.Random(f"{name}{grid}{block}{seed}").randbytes(8192)  # chunks of its own
    region = b.add_allocation(BASE, len(before), "device", True)
    b.snapshot(region, False, before)
    b.snapshot(region, True, before[::-1])
    return Record.load(b.write())
