// Proteus's current 64-bit kernel hashes, reproduced offline (migration of its
// caches and recordings; docs/hashing.md, "Proteus compatibility"). What Proteus
// computes, read from github:Olympus-HPC/proteus (e587017):
//
//   hash(bytes)      src/include/proteus/impl/Hashing.h hashValue(StringRef):
//                    XXH3-64 (llvm::xxh3_64bits) when built with LLVM >= 20, else
//                    llvm::stable_hash_combine_string = 64-bit FNV-1a.
//   combine(a, b)    Hashing.h hashCombine -> llvm::stable_hash_combine(a, b):
//                    hash() of the 16 little-endian bytes of a then b.
//   static hash      JitEngineDevice.h JITKernelInfo::createStaticHash:
//                    combine(hash(mangled name), ModuleHash).
//   ModuleHash       BinaryInfo::updateModuleHash folds values in order: the first
//                    is taken as is, each next one as combine(previous, next).
//     CUDA           JitEngineDeviceCUDA.cpp getModuleHash: for every module id of
//                    the binary (BinaryInfo::getModuleIds, registration order) the
//                    hash() of the `_jit_bitcode_*` global's bytes read back from
//                    the device. With RDC, registerLinkedBinary attaches every
//                    unit's id to the one linked binary, so all its kernels share
//                    one ModuleHash covering all units.
//     HIP            JitEngineDeviceHIP.cpp getModuleHash: for every section of the
//                    device code object whose name starts with ".jit.bitcode", in
//                    section order, the text after the name's last '.' read as an
//                    integer (HashT(StringRef): StringRef::getAsInteger radix 0, so
//                    "0x…" is hex, a leading "0" octal) — the pass wrote hash() of
//                    the section's bitcode there (ProteusPass.cpp emitModuleDevice).
// Only kernels registered by __proteus_register_function (the JIT-annotated ones)
// are ever hashed; choosing them is the caller's business.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kir/device_code.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

/// Proteus's hashValue(bytes): XXH3-64 (LLVM >= 20 builds) or 64-bit FNV-1a.
uint64_t proteus_hash(ByteView bytes, bool llvm20_or_newer);

/// Proteus's hashCombine(a, b): proteus_hash of the 16 little-endian bytes of a, b.
uint64_t proteus_hash_combine(uint64_t a, uint64_t b, bool llvm20_or_newer);

/// BinaryInfo::updateModuleHash over `values` in order (first as is, then
/// combine(previous, next)); nullopt for none (Proteus aborts there: "Expected
/// module hash to be set").
std::optional<uint64_t> proteus_fold(const std::vector<uint64_t>& values, bool llvm20_or_newer);

/// CUDA ModuleHash: the fold of proteus_hash(module) over the binary's
/// `_jit_bitcode_*` modules in registration order.
std::optional<uint64_t> proteus_cuda_module_hash(const std::vector<ByteView>& modules, bool llvm20_or_newer);

/// HIP ModuleHash of an AMDGPU code object: the fold of the name suffixes of its
/// `.jit.bitcode*` sections (DeviceCode::ir of parse_code_object, section order).
/// nullopt without such a section; an error when a suffix is not an integer
/// (Proteus would use an indeterminate value).
Expected<std::optional<uint64_t>> proteus_hip_module_hash(const DeviceCode& code, bool llvm20_or_newer);

/// createStaticHash: combine(hash(name), module_hash).
uint64_t proteus_static_hash_of_module(std::string_view name, uint64_t module_hash, bool llvm20_or_newer);

/// The static hash of kernel `name` in a CUDA binary whose modules, in
/// registration order, are `modules`: proteus_static_hash_of_module(name,
/// proteus_cuda_module_hash(modules)). No modules: combine(hash(name), 0).
uint64_t proteus_static_hash(std::string_view name, const std::vector<ByteView>& modules, bool llvm20_or_newer);

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a_64(ByteView bytes);

}  // namespace kir
