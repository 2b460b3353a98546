"""An independent model of Proteus's 64-bit kernel hash, written from Proteus's
sources (github:Olympus-HPC/proteus e587017), not from kir's code:

- src/include/proteus/impl/Hashing.h: hashValue(StringRef) is llvm::xxh3_64bits
  (LLVM >= 20) or llvm::stable_hash_combine_string (FNV-1a, older LLVM);
  hashCombine(A, B) is llvm::stable_hash_combine(A, B), the same hash of A's
  then B's 8 little-endian bytes.
- JitEngineDevice.h: BinaryInfo::updateModuleHash (first value kept, then
  hashCombine(previous, next)); JITKernelInfo::createStaticHash =
  hashCombine(hash(Name), ModuleHash).
- JitEngineDeviceCUDA.cpp getModuleHash: hash(bytes of the global) per module id,
  registration order. JitEngineDeviceHIP.cpp getModuleHash: the integer after the
  last '.' of every section whose name starts with ".jit.bitcode", section order.
"""
from __future__ import annotations

import struct

import xxhash
from elftools.elf.elffile import ELFFile


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h


def hash_value(data: bytes, llvm20: bool = True) -> int:
    return xxhash.xxh3_64_intdigest(data) if llvm20 else fnv1a(data)


def hash_combine(a: int, b: int, llvm20: bool = True) -> int:
    return hash_value(struct.pack("<QQ", a, b), llvm20)


def fold(values: list[int], llvm20: bool = True) -> int:
    module = None
    for v in values:
        module = v if module is None else hash_combine(module, v, llvm20)
    assert module is not None, "Proteus aborts: Expected module hash to be set"
    return module


def static_hash(name: str, module_hash: int, llvm20: bool = True) -> int:
    return hash_combine(hash_value(name.encode(), llvm20), module_hash, llvm20)


def cuda_module_hash(modules_in_registration_order: list[bytes], llvm20: bool = True) -> int:
    return fold([hash_value(m, llvm20) for m in modules_in_registration_order], llvm20)


def hip_section_names(code_object_path) -> list[str]:
    with open(code_object_path, "rb") as f:
        return [s.name for s in ELFFile(f).iter_sections()]


def hip_module_hash(section_names: list[str], llvm20: bool = True) -> int:
    return fold([int(n.rsplit(".", 1)[1]) for n in section_names if n.startswith(".jit.bitcode")], llvm20)
