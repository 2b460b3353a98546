"""Generate tests/golden/hash_vectors.json from the reference implementation.

    python tests/golden/make_hash_vectors.py

The vectors are committed; the C++ core must reproduce every one of them
(tests/test_hashing.py). Regenerate only when the specification changes, with a
new format version.
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


def main() -> None:
    statics, vectors = [], {"format_version": ref.VERSION, "static": [], "dynamic": [],
                            "proteus": []}
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
    for name, modules in [("_Z4axpyfPKfPfi", [b"BC\xc0\xde" + bytes(32)]),
                          ("k", [b"a", b"bb", b"ccc"]), ("empty", [])]:
        vectors["proteus"].append({
            "name": name, "modules": [m.hex() for m in modules],
            "llvm20": ref.proteus_static_hash(name, modules, True),
            "fnv": ref.proteus_static_hash(name, modules, False)})
    (HERE / "hash_vectors.json").write_text(json.dumps(vectors, indent=1) + "\n")


if __name__ == "__main__":
    main()
