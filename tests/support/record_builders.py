"""Records built by hand for the record-reader and version tests: a record of the real
sm_90 axpy (`axpy_record`), a body rewritten with a correct header (`rewrite_body`),
and a record rewritten as format version 1's writer wrote it (`as_version_1`)."""
from __future__ import annotations

import struct
from pathlib import Path

import msgpack

import hash_reference as ref
import kir
import kir.jit
from kir import _core
from kir.record import FORMAT, RECORD_HEADER, Record

AXPY = "_Z4axpyfPKfPfi"
BASE = 0x7F00_0000_0000
CS = 4096  # a small chunk size, so regions span several chunks


def h128(text: str) -> _core.Hash128:
    return _core.Hash128.from_hex(text)


def rewrite_body(path: Path, body: bytes, version: int = FORMAT["version"]) -> None:
    """Replace a record's body, with a correct header (size and checksum)."""
    digest = _core.xxh3_128(body)
    path.write_bytes(RECORD_HEADER.pack(b"KIRRECRD", version, 0, len(body), digest.high, digest.low) + body)


def as_version_1(path: Path, identity: bool = True) -> Record:
    """The record at `path` rewritten as format version 1's writer wrote it (kir at
    b11cd72; tests/fixtures/records_v1 holds a recording it wrote): version 1 in the
    header and the metadata, format 1's `launch.dynamic_hash` (by the reference
    recipe) after `launch_identity` (alone with `identity=False`: a record from before
    the launch identity), `kernel.ptx_units` and `kernel.jit_args` only when not empty,
    no allocation's `tolerance` (format 3)."""
    r = Record.load(path)
    meta = msgpack.unpackb(path.read_bytes()[RECORD_HEADER.size:])
    arch = r.kernel.image.arch if r.kernel.image is not None else r.device.arch
    dynamic = ref.dynamic_hash(r.kernel.static_hash, arch, args=[(i + 1, "bytes", a) for i, a in enumerate(r.launch.args)],
                               grid=list(r.launch.grid), block=list(r.launch.block))
    launch = meta["launch"]
    first = {"api": launch["api"], **({"launch_identity": launch["launch_identity"]} if identity else {})}
    meta["launch"] = {**first, "dynamic_hash": dynamic,
                      **{k: v for k, v in launch.items() if k not in ("api", "launch_identity")}}
    meta["kernel"] = {k: v for k, v in meta["kernel"].items() if v or k not in ("ptx_units", "jit_args")}
    meta["allocations"] = [{k: v for k, v in a.items() if k != "tolerance"} for a in meta["allocations"]]  # 3-
    meta["version"] = 1
    rewrite_body(path, msgpack.packb(meta), version=1)
    return Record.load(path)


def axpy_record(directory, cubin: Path, a=2.0, n=1000, ptx: bytes | None = None, alter=None,
                image_arch: str = "sm_90"):
    """A record of axpy(a, x, y, n) from the real sm_90 cubin, hashed as the hook does;
    `alter(args)` changes the arguments after hashing; `image_arch`: the arch written
    for the image ("" as kir's hook wrote it for a bare cubin before it read e_flags)."""
    image = cubin.read_bytes()
    [kernel] = [k for i in kir.open(cubin).images for k in i.kernels if k.name == AXPY]
    offsets, sizes = [p.offset for p in kernel.params], [p.size for p in kernel.params]
    x, y = BASE, BASE + (1 << 21)
    args = [struct.pack("<f", a), struct.pack("<Q", x), struct.pack("<Q", y), struct.pack("<i", n)]
    static = _core.static_hash(AXPY, "cubin", [image])
    identity = ref.launch_identity(str(static), "sm_90", args, [4, 1, 1], [256, 1, 1], 0)
    if alter:
        alter(args)
    b = _core.RecordBuilder(str(directory), CS)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(AXPY, kir.demangle(AXPY), static, offsets, sizes)
    b.set_image("cubin", image_arch, image)
    if ptx is not None:
        b.set_ptx("sm_90", ptx)
    b.set_launch("cudaLaunchKernel", h128(identity), (4, 1, 1), (256, 1, 1), 0, 0, args, 0)
    b.set_va_range(BASE, 1 << 30)
    xs = struct.pack(f"<{n}f", *range(n))
    ys = struct.pack(f"<{n}f", *(float(i % 7) for i in range(n)))
    out = struct.pack(f"<{n}f", *(a * i + float(i % 7) for i in range(n)))
    for address, before, after in ((x, xs, xs), (y, ys, out)):
        region = b.add_allocation(address, len(before), "device", True)
        b.snapshot(region, False, before)
        b.snapshot(region, True, after)
    counter = b.add_global("counter", 0x1000, 4)
    b.snapshot(counter, False, b"\0" * 4)
    b.snapshot(counter, True, struct.pack("<i", 1024))
    return Record.load(b.write()), kernel, args
