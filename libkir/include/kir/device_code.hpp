// What a device image holds, whatever its format: its kernels (with parameter
// layout and the resources the compiler recorded), other functions, global
// variables, and the LLVM IR embedded in it. The parsers live with their
// formats: kir/cuda/cubin.hpp, kir/cuda/ptx.hpp, kir/amdgpu/code_object.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kir/hash/hash.hpp"
#include "kir/model.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

struct KernelParam {
  uint32_t ordinal = 0;  // 0-based position in the signature
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size = 0;     // bytes
};

struct Kernel {
  std::string name;                                    // mangled
  std::string demangled;                               // C++ name (== name when not mangled)
  std::vector<KernelParam> params;                     // sorted by ordinal
  std::optional<uint32_t> param_bytes;                 // total parameter buffer size
  std::optional<uint32_t> registers;                   // per thread
  std::optional<uint64_t> shared_bytes;                // static shared memory
  std::optional<uint32_t> frame_bytes;                 // per-thread stack frame
  std::optional<std::array<uint32_t, 3>> max_threads;  // __launch_bounds__
  std::optional<std::array<uint32_t, 3>> required_threads;
  std::optional<std::array<uint32_t, 3>> cluster_dims;
  uint64_t code_bytes = 0;
};

struct DeviceGlobal {
  std::string name;
  std::string section;  // .nv.global, .nv.global.init, .nv.constant3 ... ("" in PTX; AMDGPU: .bss, .data ...)
  uint64_t size = 0;
};

/// LLVM IR embedded inside device code by the Proteus JIT pass (formats.md §5):
/// CUDA `_jit_bitcode_*` globals in a cubin's `.nv.global.init`; HIP
/// `.jit.bitcode.*` sections of an AMDGPU code object.
struct EmbeddedModule {
  std::string name;    // the symbol or section name
  std::string kernel;  // HIP per-kernel sections: the mangled kernel; else ""
  std::string md5;     // HIP: the hex field of the section name; else ""
  std::string hash;    // HIP: the decimal hash field (Proteus's 64-bit hash); else ""
  std::vector<uint8_t> bitcode;
  Hash128 digest;  // XXH3-128 of `bitcode` (a MODULE record of the static hash)
};

struct DeviceCode {
  ImageKind kind = ImageKind::unknown;  // the image it was decoded from: cubin, ptx, code-object
  std::vector<Kernel> kernels;
  std::vector<std::string> functions;  // defined non-kernel functions
  std::vector<DeviceGlobal> globals;
  std::string target;                   // AMDGPU code objects: "amdgcn-amd-amdhsa--gfx90a:xnack+"
  std::vector<EmbeddedModule> ir;       // IR embedded by the Proteus pass
  std::optional<Hash128> image_digest;  // XXH3-128 of the decoded image, when asked for
};

}  // namespace kir
