"""Generate tests/golden/hash_vectors.json from the reference implementation
(tests/hash_reference.py): static hashes, JIT keys (from values, and from launches
whose arrays and objects are read from memory), launch identities, format 1's
dynamic hashes (still checked in older records) and Proteus's 64-bit hashes.

    python tests/golden/make_hash_vectors.py

The vectors are committed; the C++ core must reproduce every one of them
(tests/test_hashing.py). Regenerate only when the specification changes, with a
new format version; the static vectors never change.
"""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import hash_reference as ref  # noqa: E402


def static_cases():
    yield "_Z4axpyfPKfPfi", "ir", [b"BC\xc0\xde" + bytes(range(64))]
    yield "_Z4axpyfPKfPfi", "cubin", [b"\x7fELF" + bytes(100)]
    yield "", "ir", []
    yield "kernel", "ir", [b"module-a", b"module-b", b"module-c"]
    yield "kernel", "ir", [b"module-c", b"module-a", b"module-b"]  # order does not matter
    yield "_ZN5cutlass6KernelINS_4gemmEEEvT_", "ptx", [b".version 9.0\n" * 100]
    yield "k\u00e9", "code-object", [bytes(4096)]


def dynamic_cases(statics):
    s = statics[0]
    yield s, "sm_90", {}
    yield s, "sm_80", {}
    yield s, "gfx90a:xnack+", {}
    yield s, "sm_90", {"grid": [128, 1, 1], "block": [256, 1, 1]}
    yield s, "sm_90", {"args": [[1, "i32", struct.pack("<i", 7)], [2, "f32", struct.pack("<f", 2.5)],
                                [3, "u64", struct.pack("<Q", 2**40)], [4, "f64", struct.pack("<d", -1.0)]],
                       "grid": [64, 2, 1], "block": [128, 1, 1]}
    yield s, "sm_90", {"args": [[2, "bytes", bytes(range(24))]], "bounds": [256, 2]}
    yield s, "sm_90", {"config": [["opt-level", b"3"], ["pipeline", b"default<O3>"]]}
    yield s, "sm_90", {"args": [[1, "bytes", bytes(700)]]}  # longer than the inline buffer


def jit_key_cases(statics):
    s, t = statics[0], statics[3]
    i32, f32, f64 = (lambda v: struct.pack("<i", v)), (lambda v: struct.pack("<f", v)), (lambda v: struct.pack("<d", v))
    yield s, "sm_90", {}
    yield s, "sm_80", {}
    yield s, "gfx90a:xnack+", {}
    yield t, "sm_90", {}
    yield s, "sm_90", {"args": [[1, 12, f64(2.5)]]}
    yield s, "sm_90", {"args": [[1, 12, f64(3.5)]]}
    yield s, "sm_90", {"args": [[4, 3, i32(256)], [1, 11, f32(2.5)]]}  # any order: sorted by position
    yield s, "sm_90", {"args": [[2, 12, b"".join(f64(x) for x in (1.0, 2.0, 3.0))]]}  # an array of 3 doubles
    yield s, "sm_90", {"args": [[3, 14, bytes(range(24))]]}  # an object
    yield s, "sm_90", {"args": [[1, 15, b"\x01"], [2, 13, struct.pack("<Q", 0x7f0000001000)]]}
    yield s, "sm_90", {"grid": [128, 1, 1]}
    yield s, "sm_90", {"block": [256, 1, 1]}
    yield s, "sm_90", {"grid": [128, 2, 1], "block": [256, 1, 1]}
    yield s, "sm_90", {"bounds": [256, 2]}
    yield s, "sm_90", {"bounds": [0, 0]}  # no bounds, as None
    yield s, "sm_90", {"shared_bytes": 49152}
    yield s, "sm_90", {"shared_bytes": 2**40}
    yield s, "sm_90", {"config": [["opt-level", b"3"], ["pipeline", b"default<O3>"], ["codegen", b"serial"]]}
    yield s, "sm_90", {"captures": [["main::{lambda(int)#1}", 0, 8, 3, i32(42)],
                                    ["main::{lambda(int)#1}", 1, 16, 12, f64(0.5)]]}
    yield s, "sm_90", {"args": [[1, 12, f64(2.5)], [3, 7, struct.pack("<I", 7)]],
                       "captures": [["L", 0, 0, 11, f32(1.0)]], "grid": [64, 1, 1], "block": [128, 1, 1],
                       "bounds": [128, 4], "shared_bytes": 1024, "config": [["opt-level", b"3"]]}
    yield s, "sm_90", {"args": [[1, 14, bytes(700)]]}  # longer than the builder's inline buffer


def launch_cases(statics):
    """(static, arch, params, jit_args, memory, launch fields): JIT keys of launches."""
    s = statics[0]
    ptr = lambda a: struct.pack("<Q", a)  # noqa: E731
    d = lambda *xs: b"".join(struct.pack("<d", x) for x in xs)  # noqa: E731
    base = 0x7f0000000000
    # scalars: f32, a pointer, an int
    yield s, "sm_90", [struct.pack("<f", 2.5), ptr(base), ptr(base + 64), struct.pack("<i", 256)], \
        [{"position": 1, "kind": 0, "type": 11}, {"position": 4, "kind": 0, "type": 3}], {}, {}
    # an array of constant size 4 (f64) read through its pointer, n = 3 elements from argument 3 (i32)
    yield s, "sm_90", [ptr(base), ptr(base + 0x100), struct.pack("<i", 3)], \
        [{"position": 1, "kind": 1, "type": 12, "count": 4},
         {"position": 2, "kind": 1, "type": 12, "count_position": 3, "count_type": 3}], \
        {base: d(1, 2, 3, 4), base + 0x100: d(5, 6, 7, 8, 9)}, {"grid": [8, 1, 1], "specialize_grid": True}
    # the same array contents at another address: the same key
    yield s, "sm_90", [ptr(base + 0x4000), ptr(base + 0x100), struct.pack("<i", 3)], \
        [{"position": 1, "kind": 1, "type": 12, "count": 4},
         {"position": 2, "kind": 1, "type": 12, "count_position": 3, "count_type": 3}], \
        {base + 0x4000: d(1, 2, 3, 4), base + 0x100: d(5, 6, 7, 8, 9)}, {"grid": [8, 1, 1], "specialize_grid": True}
    # an element count of unsigned 64-bit type, 0 elements
    yield s, "sm_90", [ptr(0), struct.pack("<Q", 0)], \
        [{"position": 1, "kind": 1, "type": 3, "count_position": 2, "count_type": 8}], {}, {}
    # objects: by value (the argument's 16 bytes), by pointer (24 bytes read)
    yield s, "sm_90", [struct.pack("<dq", 1.5, 7), ptr(base + 0x200)], \
        [{"position": 1, "kind": 2, "type": 14, "by_value": 1, "count": 16},
         {"position": 2, "kind": 2, "type": 14, "count": 24}], {base + 0x200: bytes(range(100, 124))}, \
        {"block": [256, 1, 1], "specialize_block": True, "bounds": [256, 2], "shared_bytes": 4096}
    # a by-value array (Proteus STATIC_ARRAY / VECTOR): 4 floats in the argument
    yield s, "sm_90", [struct.pack("<4f", 1, 2, 3, 4)], \
        [{"position": 1, "kind": 1, "type": 11, "by_value": 1, "count": 4}], {}, {}
    # a large array (1100 doubles: 8800 bytes, read in 4 KiB pieces)
    yield s, "sm_90", [ptr(base)], [{"position": 1, "kind": 1, "type": 12, "count": 1100}], \
        {base: d(*range(1100))}, {}


def launch_identity_cases(statics):
    s = statics[0]
    args = [struct.pack("<f", 2.5), bytes(8), bytes(8), struct.pack("<i", 256)]
    yield s, "sm_90", args, [4, 1, 1], [64, 1, 1], 0
    yield s, "sm_90", args, [4, 1, 1], [64, 1, 1], 128
    yield s, "sm_80", args, [4, 1, 1], [64, 1, 1], 0
    yield s, "sm_90", [struct.pack("<d3i4x", 1.5, 1, 2, 3), struct.pack("<Q", 1 << 40), b"z"], [1, 1, 1], [1, 1, 1], 128
    yield s, "sm_90", [], [1, 1, 1], [32, 1, 1], 0
    yield s, "sm_90", [b"\x01", None, b"\x02"], [2, 2, 2], [8, 8, 8], 2**33  # a parameter left out
    yield s, "sm_90", [bytes(4096)], [1, 1, 1], [1, 1, 1], 0


def main() -> None:
    statics, vectors = [], {"format_version": ref.SPEC_VERSION, "static": [], "dynamic": [],
                            "jit_key": [], "jit_key_launch": [], "launch_identity": [], "proteus": []}
    for name, kind, modules in static_cases():
        h = ref.static_hash(name, kind, modules)
        statics.append(h)
        vectors["static"].append({"name": name, "code_kind": kind,
                                  "modules": [m.hex() for m in modules], "hash": h})
    for static, arch, fields in dynamic_cases(statics):
        args = [(p, t, v) for p, t, v in fields.get("args", [])]
        config = [(k, v) for k, v in fields.get("config", [])]
        h = ref.dynamic_hash(static, arch, args=args, grid=fields.get("grid"),
                             block=fields.get("block"), bounds=fields.get("bounds"), config=config)
        vectors["dynamic"].append({
            "static": static, "arch": arch,
            "args": [[p, t, v.hex()] for p, t, v in args], "grid": fields.get("grid"),
            "block": fields.get("block"), "bounds": fields.get("bounds"),
            "config": [[k, v.hex()] for k, v in config], "hash": h})
    for static, arch, fields in jit_key_cases(statics):
        args = [(p, t, v) for p, t, v in fields.get("args", [])]
        captures = [tuple(c) for c in fields.get("captures", [])]
        config = [(k, v) for k, v in fields.get("config", [])]
        h = ref.jit_key(static, arch, args=args, grid=fields.get("grid"), block=fields.get("block"),
                        shared_bytes=fields.get("shared_bytes", 0), bounds=fields.get("bounds"),
                        config=config, captures=captures)
        vectors["jit_key"].append({
            "static": static, "arch": arch, "args": [[p, t, v.hex()] for p, t, v in args],
            "grid": fields.get("grid"), "block": fields.get("block"),
            "shared_bytes": fields.get("shared_bytes", 0), "bounds": fields.get("bounds"),
            "config": [[k, v.hex()] for k, v in config],
            "captures": [[lam, slot, off, t, v.hex()] for lam, slot, off, t, v in captures], "hash": h})
    for static, arch, params, jit_args, memory, launch in launch_cases(statics):
        args = ref.jit_arg_values(params, jit_args, memory)
        h = ref.jit_key(static, arch, args=args,
                        grid=launch.get("grid") if launch.get("specialize_grid") else None,
                        block=launch.get("block") if launch.get("specialize_block") else None,
                        shared_bytes=launch.get("shared_bytes", 0), bounds=launch.get("bounds"))
        vectors["jit_key_launch"].append({
            "static": static, "arch": arch, "params": [p.hex() for p in params], "jit_args": jit_args,
            "memory": {str(a): b.hex() for a, b in memory.items()}, "launch": launch, "hash": h})
    for static, arch, args, grid, block, shared in launch_identity_cases(statics):
        vectors["launch_identity"].append({
            "static": static, "arch": arch, "args": [None if a is None else a.hex() for a in args],
            "grid": grid, "block": block, "shared_bytes": shared,
            "hash": ref.launch_identity(static, arch, args, grid, block, shared)})
    for name, modules in [("_Z4axpyfPKfPfi", [b"BC\xc0\xde" + bytes(32)]),
                          ("k", [b"a", b"bb", b"ccc"]), ("empty", [])]:
        vectors["proteus"].append({
            "name": name, "modules": [m.hex() for m in modules],
            "llvm20": ref.proteus_static_hash(name, modules, True),
            "fnv": ref.proteus_static_hash(name, modules, False)})
    (HERE / "hash_vectors.json").write_text(json.dumps(vectors, indent=1) + "\n")


if __name__ == "__main__":
    main()
