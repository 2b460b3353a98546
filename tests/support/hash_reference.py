"""A second, independent implementation of kir's hash encoding (docs/hashing.md),
in plain Python with the PyPI `xxhash` package as XXH3. Used only by the tests:
golden vectors are generated from it, and the C++ core must agree with it."""
from __future__ import annotations

import struct

import xxhash

SPEC_VERSION = 2   # docs/hashing.md
VERSION = 1        # the static hash's HEADER version (unchanged since format 1)
STATIC_DOMAIN = b"kir.static-hash"
DYNAMIC_DOMAIN = b"kir.dynamic-hash"          # format 1's dynamic hash (records written before 2)
JIT_KEY_DOMAIN, JIT_KEY_VERSION = b"kir.jit-key", 2
LAUNCH_DOMAIN, LAUNCH_VERSION = b"kir.launch-identity", 2
OMP_REGION_DOMAIN, OMP_REGION_VERSION = b"kir.omp-region", 1
HEADER, NAME, CODE_KIND, MODULE = 0x00, 0x01, 0x02, 0x03
STATIC, ARCH, ARG, GRID, BLOCK, BOUNDS, CONFIG = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
SHARED, CAPTURE, SPECIALIZE = 0x17, 0x18, 0x19
SPECIALIZE_GRID, SPECIALIZE_BLOCK, SPECIALIZE_BOUNDS = 1, 2, 4
ARG_TYPES = {"i8": 1, "i16": 2, "i32": 3, "i64": 4, "u8": 5, "u16": 6, "u32": 7, "u64": 8,
             "f16": 9, "bf16": 10, "f32": 11, "f64": 12, "ptr": 13, "bytes": 14, "bool": 15}


def record(tag: int, payload: bytes) -> bytes:
    return struct.pack("<BI", tag, len(payload)) + payload


def header(domain: bytes, version: int = VERSION) -> bytes:
    return record(HEADER, domain + struct.pack("<I", version))


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


def omp_region_identity(normalized_name: str, code_kind: str, code: bytes) -> str:
    """An OpenMP target region's identity, its canonical code given as bytes."""
    encoding = (header(OMP_REGION_DOMAIN, OMP_REGION_VERSION) + record(NAME, normalized_name.encode())
                + record(CODE_KIND, code_kind.encode()) + record(MODULE, digest(code)))
    return xxhash.xxh3_128_hexdigest(encoding)


def type_number(kind) -> int:
    return ARG_TYPES[kind] if isinstance(kind, str) else int(kind)


def canonical_target_id(arch: str) -> str:
    """An AMDGPU target-id's features sorted by name (docs/hashing.md, ARCH): the
    processor first; anything else as it is."""
    processor, *features = arch.split(":")
    if not arch.startswith("gfx") or not features:
        return arch
    return ":".join([processor, *sorted(features, key=lambda f: f[:-1])])


def jit_key_encoding(static_hex: str, arch: str, args=(), grid=None, block=None, shared_bytes=0,
                     bounds=None, config=(), captures=()) -> bytes:
    """The JIT key's records. args: [(position, type name or number, value bytes)], any
    order (sorted by position here); grid / block: the dims when specialized, else None;
    bounds: (max threads, min blocks), None or (0, 0) for none; config: [(key, value
    bytes)]; captures: [(lambda, slot, offset, type, value bytes)]."""
    out = (header(JIT_KEY_DOMAIN, JIT_KEY_VERSION) + record(STATIC, bytes.fromhex(static_hex))
           + record(ARCH, canonical_target_id(arch).encode()))
    for position, kind, value in sorted(args, key=lambda a: a[0]):
        out += record(ARG, struct.pack("<IB", position, type_number(kind)) + bytes(value))
    for lam, slot, offset, kind, value in captures:
        name = lam.encode()
        out += record(CAPTURE, struct.pack("<I", len(name)) + name
                      + struct.pack("<IIB", slot, offset, type_number(kind)) + bytes(value))
    has_bounds = bounds is not None and tuple(bounds) != (0, 0)
    flags = ((SPECIALIZE_GRID if grid is not None else 0) | (SPECIALIZE_BLOCK if block is not None else 0)
             | (SPECIALIZE_BOUNDS if has_bounds else 0))
    out += record(SPECIALIZE, struct.pack("<I", flags))
    if grid is not None:
        out += record(GRID, struct.pack("<3I", *grid))
    if block is not None:
        out += record(BLOCK, struct.pack("<3I", *block))
    if has_bounds:
        out += record(BOUNDS, struct.pack("<2I", *bounds))
    out += record(SHARED, struct.pack("<Q", shared_bytes))
    for key, value in config:
        out += record(CONFIG, struct.pack("<I", len(key.encode())) + key.encode() + bytes(value))
    return out


def jit_key(static_hex: str, arch: str, **fields) -> str:
    return xxhash.xxh3_128_hexdigest(jit_key_encoding(static_hex, arch, **fields))


def launch_identity_encoding(static_hex: str, arch: str, args, grid, block, shared_bytes=0) -> bytes:
    """The launch identity's records. args: every parameter's bytes in order (None: left out)."""
    out = (header(LAUNCH_DOMAIN, LAUNCH_VERSION) + record(STATIC, bytes.fromhex(static_hex))
           + record(ARCH, arch.encode()))
    for position, value in enumerate(args, start=1):
        if value is not None:
            out += record(ARG, struct.pack("<IB", position, ARG_TYPES["bytes"]) + bytes(value))
    return (out + record(GRID, struct.pack("<3I", *grid)) + record(BLOCK, struct.pack("<3I", *block))
            + record(SHARED, struct.pack("<Q", shared_bytes)))


def launch_identity(static_hex: str, arch: str, args, grid, block, shared_bytes=0) -> str:
    return xxhash.xxh3_128_hexdigest(launch_identity_encoding(static_hex, arch, args, grid, block, shared_bytes))


def dynamic_encoding(static_hex: str, arch: str, args=(), grid=None, block=None, bounds=None,
                     config=()) -> bytes:
    """Format 1's dynamic hash (kept in records for older readers).
    args: [(position, type name, value bytes)]; config: [(key, value bytes)]."""
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


TYPE_SIZES = {1: 1, 2: 2, 3: 4, 4: 8, 5: 1, 6: 2, 7: 4, 8: 8, 9: 2, 10: 2, 11: 4, 12: 8, 13: 8, 15: 1}
SIGNED = {1: "<b", 2: "<h", 3: "<i", 4: "<q"}
UNSIGNED = {5: "<B", 6: "<H", 7: "<I", 8: "<Q"}


def jit_arg_values(params: list[bytes], jit_args: list[dict], memory: dict[int, bytes]):
    """The JIT key's ARG values of a launch, as docs/hashing.md says a JIT reads them:
    `params` the launch's argument bytes, `jit_args` dicts with kir_jit_arg's fields
    (position, kind 0 scalar / 1 array / 2 object, type, by_value, count,
    count_position, count_type), `memory` {address: bytes}. Returns [(position,
    type, value bytes)]."""
    def read(address: int, size: int) -> bytes:
        for start, data in memory.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise KeyError(f"no memory at {address:#x}+{size}")

    out = []
    for a in jit_args:
        param = params[a["position"] - 1]
        kind, type_ = a["kind"], a["type"]
        if kind == 0:
            size = TYPE_SIZES.get(type_, len(param))
            value = param[:size]
        else:
            if kind == 1:
                count = a.get("count", 0)
                if a.get("count_position"):
                    holder = params[a["count_position"] - 1]
                    fmt = SIGNED.get(a["count_type"]) or UNSIGNED[a["count_type"]]
                    count = struct.unpack_from(fmt, holder)[0]
                size = count * TYPE_SIZES[type_]
            else:
                size = a["count"]
            if a.get("by_value"):
                value = param[:size]
            else:
                value = read(struct.unpack_from("<Q", param)[0], size) if size else b""
        out.append((a["position"], type_, value))
    return out
