"""A record of one saxpy launch written by the C++ writer (kir._core.RecordBuilder) around
the rec_clang_ir binary's saxpy (its IR, sm_90 cubin and static hash: the `saxpy` fixture).
Shared by the replay-variant, tune, progress and cache-trust tests."""
from __future__ import annotations

import struct

import pytest

import kir._core as core
from kir import hashing
from kir.record import Record

SAXPY = "_Z5saxpyfPKfPfi"
N = 4096
A = 2.5
X, Y = 0x7F0000000000, 0x7F0000200000
F32 = hashing._type("f32")


@pytest.fixture(scope="module")
def saxpy(built):
    """The rec_clang_ir binary's saxpy: its IR, sm_90 cubin and static hash, as `kir
    jit compile` finds them (kir.commands.jit.find_kernel)."""
    if "rec_clang_ir" not in built:
        pytest.skip("rec_clang_ir is not built here (it needs clang-22)")
    from kir.binary import Binary
    from kir.commands.jit import find_kernel
    found = find_kernel(str(built["rec_clang_ir"]), SAXPY, "sm_90")
    binary = Binary.open(built["rec_clang_ir"])
    image = next(i for i in binary.images if str(i.kind).endswith("cubin") and i.target == "sm_90"
                 and any(k.name == SAXPY for k in i.kernels))
    return {"ir": found.module, "static": found.static_hash, "cubin": image.read()}


def write_record(directory, saxpy, *, image=True, jit_args=True, array=False, ir=True, epilogue_ulps=0,
                 grid=(16, 1, 1), block=(256, 1, 1)) -> Record:
    """saxpy(2.5, x, y, N) at grid 16 block 256 (or `grid` and `block`: the launch as
    recorded, e.g. a 2-D one for the tuner's block candidates), as the hook writes it: the
    prologue x, y and the epilogue y = fmaf(a, x, y) (computed here in float64,
    exact for these values); with `epilogue_ulps`, every nonzero y of the epilogue
    that many ulp above it (a recording the GPU's result matches only within a
    ULP tolerance)."""
    b = core.RecordBuilder(str(directory))
    b.set_process(1234, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(SAXPY, "saxpy(float, float const*, float*, int)", core.Hash128.from_hex(saxpy["static"]),
                 [0, 8, 16, 24], [4, 8, 8, 4])
    if image:
        b.set_image("cubin", "sm_90", saxpy["cubin"])
    if ir:  # ir=False: an nvcc build's record (code, no LLVM IR)
        b.set_ir(saxpy["ir"])
    annotated = []
    if jit_args:
        annotated.append((1, "scalar", F32, False, 0, 0, 0))
    if array:  # x as an array of N floats read through its pointer (count: argument 4, an i32)
        annotated.append((2, "array", F32, False, 0, hashing._type("i32"), 4))
    if annotated:
        b.set_jit_args(annotated)
    args = [struct.pack("<f", A), X.to_bytes(8, "little"), Y.to_bytes(8, "little"), struct.pack("<i", N)]
    grid, block = tuple(grid), tuple(block)
    identity = hashing.launch_identity(saxpy["static"], "sm_90", args, grid=grid, block=block)
    b.set_launch("cudaLaunchKernel", core.Hash128.from_hex(identity), grid, block, 0, 0, args, 0)
    b.set_va_range(0x7F0000000000, 1 << 30)
    x = [float(i % 7) * 0.5 for i in range(N)]
    y = [float(i % 100) * 0.25 for i in range(N)]
    for address, before, after in ((X, x, x), (Y, y, [A * u + v for u, v in zip(x, y)])):
        region = b.add_allocation(address, 4 * N, "device", True)
        b.snapshot(region, False, struct.pack(f"<{N}f", *before))
        packed = struct.pack(f"<{N}f", *after)
        if address == Y and epilogue_ulps:
            bits = struct.unpack(f"<{N}I", packed)
            packed = struct.pack(f"<{N}I", *(b + epilogue_ulps if b & 0x7FFFFFFF else b for b in bits))
        b.snapshot(region, True, packed)
    return Record.load(b.write())
