"""An independent reading of docs/cache.md's entry layout, in plain Python with the
PyPI `xxhash` package for XXH3-128: the tests check the core's files against it
and use it to craft entries whose checksum is right but whose fields are not."""
from __future__ import annotations

import struct

import xxhash

MAGIC = b"KIRCACHE"
VERSION = 1
HEADER = 64
KINDS = {"cubin": 1, "ptx": 2, "code-object": 5}
# Header: magic, version, header size, key (16 bytes, big-endian hex order), code kind,
# metadata count, code size, metadata bytes, arch size, reserved.
HEADER_FORMAT = "<8sII16sIIQQII"
assert struct.calcsize(HEADER_FORMAT) == HEADER


def align16(n: int) -> int:
    return (n + 15) // 16 * 16


def encode(key: str, code: bytes, kind: str, arch: str, meta: dict[str, str], *, version: int = VERSION,
           kind_number: int | None = None, meta_blob: bytes | None = None, meta_count: int | None = None) -> bytes:
    """An entry file; the keyword arguments override fields (the checksum stays right)."""
    if meta_blob is None:
        meta_blob = b"".join(struct.pack("<I", len(s)) + s
                             for k, v in meta.items() for s in (k.encode(), v.encode()))
    a = arch.encode()
    header = struct.pack(HEADER_FORMAT, MAGIC, version, HEADER, bytes.fromhex(key),
                         KINDS[kind] if kind_number is None else kind_number,
                         len(meta) if meta_count is None else meta_count, len(code), len(meta_blob), len(a), 0)
    body = header + a + meta_blob
    body += b"\0" * (align16(len(body)) - len(body)) + code
    return body + checksum(body)


def checksum(body: bytes) -> bytes:
    return xxhash.xxh3_128_digest(body)  # canonical: big-endian, high half first


def decode(data: bytes) -> dict:
    """The fields of a well-formed entry (assertions, not error handling: the oracle
    reads only files the tests expect to be intact)."""
    magic, version, header, key, kind, count, code_size, meta_bytes, arch_size, reserved = \
        struct.unpack_from(HEADER_FORMAT, data)
    assert (magic, version, header, reserved) == (MAGIC, VERSION, HEADER, 0)
    arch = data[HEADER:HEADER + arch_size].decode()
    at, meta = HEADER + arch_size, {}
    for _ in range(count):
        n, = struct.unpack_from("<I", data, at)
        k = data[at + 4:at + 4 + n].decode()
        at += 4 + n
        n, = struct.unpack_from("<I", data, at)
        meta[k] = data[at + 4:at + 4 + n].decode()
        at += 4 + n
    assert at == HEADER + arch_size + meta_bytes
    code_at = align16(at)
    assert len(data) == code_at + code_size + 16
    assert data[code_at + code_size:] == checksum(data[:code_at + code_size])
    kind_name = {v: k for k, v in KINDS.items()}[kind]
    return {"key": key.hex(), "kind": kind_name, "arch": arch, "meta": meta,
            "code": data[code_at:code_at + code_size], "code_offset": code_at}
