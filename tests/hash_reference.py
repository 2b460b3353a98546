"""A second, independent implementation of kir's hash encoding (docs/hashing.md),
in plain Python with the PyPI `xxhash` package as XXH3. Used only by the tests:
golden vectors are generated from it, and the C++ core must agree with it."""
from __future__ import annotations

import struct

import xxhash

VERSION = 1
STATIC_DOMAIN = b"kir.static-hash"
DYNAMIC_DOMAIN = b"kir.dynamic-hash"
HEADER, NAME, CODE_KIND, MODULE = 0x00, 0x01, 0x02, 0x03
STATIC, ARCH, ARG, GRID, BLOCK, BOUNDS, CONFIG = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
ARG_TYPES = {"i8": 1, "i16": 2, "i32": 3, "i64": 4, "u8": 5, "u16": 6, "u32": 7, "u64": 8,
             "f16": 9, "bf16": 10, "f32": 11, "f64": 12, "ptr": 13, "bytes": 14, "bool": 15}


def record(tag: int, payload: bytes) -> bytes:
    return struct.pack("<BI", tag, len(payload)) + payload


def header(domain: bytes) -> bytes:
    return record(HEADER, domain + struct.pack("<I", VERSION))


def digest(data: bytes) -> bytes:
    """XXH3-128, canonical (big-endian, high half first)."""
    return xxhash.xxh3_128_digest(data)


def static_encoding(name: str, code_kind: str, modules: list[bytes]) -> bytes:
    out = header(STATIC_DOMAIN) + record(NAME, name.encode()) + record(CODE_KIND, code_kind.encode())
    for d in sorted(digest(m) for m in modules):
        out += record(MODULE, d)
    return out


def static_hash(name: str, code_kind: str, modules: list[bytes]) -> str:
    return xxhash.xxh3_128_hexdigest(static_encoding(name, code_kind, modules))


def dynamic_encoding(static_hex: str, arch: str, args=(), grid=None, block=None, bounds=None,
                     config=()) -> bytes:
    """args: [(position, type name, value bytes)]; config: [(key, value bytes)]."""
    out = header(DYNAMIC_DOMAIN) + record(STATIC, bytes.fromhex(static_hex)) + record(ARCH, arch.encode())
    for position, kind, value in args:
        out += record(ARG, struct.pack("<IB", position, ARG_TYPES[kind]) + value)
    if grid is not None:
        out += record(GRID, struct.pack("<3I", *grid))
    if block is not None:
        out += record(BLOCK, struct.pack("<3I", *block))
    if bounds is not None:
        out += record(BOUNDS, struct.pack("<2I", *bounds))
    for key, value in config:
        out += record(CONFIG, struct.pack("<I", len(key.encode())) + key.encode() + value)
    return out


def dynamic_hash(static_hex: str, arch: str, **fields) -> str:
    return xxhash.xxh3_128_hexdigest(dynamic_encoding(static_hex, arch, **fields))


def fnv1a_64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def proteus_static_hash(name: str, modules: list[bytes], llvm20_or_newer: bool = True) -> int:
    """Proteus's current 64-bit static hash (LLVM >= 20: XXH3-64; older: FNV-1a)."""
    h = xxhash.xxh3_64_intdigest if llvm20_or_newer else fnv1a_64

    def combine(a: int, b: int) -> int:
        return h(struct.pack("<QQ", a, b))

    module = 0
    for i, m in enumerate(modules):
        module = h(m) if i == 0 else combine(module, h(m))
    return combine(h(name.encode()), module)
