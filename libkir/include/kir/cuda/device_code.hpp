// What a device image holds: its kernels (with parameter layout and the
// resources the compiler recorded), other functions, and global variables.
//
// Cubins (CUDA ELF, e_machine 190) record per-kernel attributes in
// `.nv.info.<kernel>` and per-module ones in `.nv.info`, as a list of EIATTR
// records: u8 format, u8 attribute, then
//   format 1 (NVAL) u16 unused       format 2 (BVAL) u8 value, u8 unused
//   format 3 (HVAL) u16 value        format 4 (SVAL) u16 size, size bytes
// Attributes decoded here (values read off cubins built by nvcc 13):
//   0x17 KPARAM_INFO  {u32 index, u16 ordinal, u16 offset, u32 bits}, size = bits >> 18
//   0x19 CBANK_PARAM_SIZE  (HVAL) total parameter bytes
//   0x2f REGCOUNT     {u32 symbol index, u32 registers}      (in .nv.info)
//   0x11 FRAME_SIZE   {u32 symbol index, u32 bytes}           (in .nv.info)
//   0x05 MAX_THREADS  {u32 x, u32 y, u32 z}  (__launch_bounds__)
//   0x10 REQNTID      {u32 x, u32 y, u32 z}  (required block size)
//   0x3d CTA_PER_CLUSTER {u32 x, u32 y, u32 z} (__cluster_dims__)
// A function is a kernel (an entry point) when the cubin has a parameter
// constant bank `.nv.constant0.<name>` for it. Static shared memory is the size
// of `.nv.shared.<name>`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kir/hash/hash.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

struct KernelParam {
  uint32_t ordinal = 0;  // 0-based position in the signature
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size = 0;     // bytes
};

struct Kernel {
  std::string name;       // mangled
  std::string demangled;  // C++ name (== name when not mangled)
  std::vector<KernelParam> params;  // sorted by ordinal
  std::optional<uint32_t> param_bytes;   // total parameter buffer size
  std::optional<uint32_t> registers;     // per thread
  std::optional<uint64_t> shared_bytes;  // static shared memory
  std::optional<uint32_t> frame_bytes;   // per-thread stack frame
  std::optional<std::array<uint32_t, 3>> max_threads;  // __launch_bounds__
  std::optional<std::array<uint32_t, 3>> required_threads;
  std::optional<std::array<uint32_t, 3>> cluster_dims;
  uint64_t code_bytes = 0;
};

struct DeviceGlobal {
  std::string name;
  std::string section;  // .nv.global, .nv.global.init, .nv.constant3 ... ("" in PTX)
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
};

struct DeviceCode {
  std::vector<Kernel> kernels;
  std::vector<std::string> functions;  // defined non-kernel functions
  std::vector<DeviceGlobal> globals;
  std::string target;                  // AMDGPU code objects: "amdgcn-amd-amdhsa--gfx90a:xnack+"
  std::vector<EmbeddedModule> ir;      // IR embedded by the Proteus pass
  std::optional<Hash128> image_digest;  // XXH3-128 of the decoded image, when asked for
};

/// Kernels, functions and globals of a CUDA ELF (cubin).
Expected<DeviceCode> parse_cubin(ByteView cubin);

/// Kernels (from the metadata note: parameters, registers, LDS, scratch; else
/// from `.kd` descriptors), the target id and embedded IR of an AMDGPU code object.
Expected<DeviceCode> parse_code_object(ByteView elf);

/// Kernels (`.entry`, with parameter sizes and offsets) and globals of PTX text.
Expected<DeviceCode> parse_ptx(ByteView ptx);

/// Itanium C++ demangling (the name itself when it is not a mangled name).
std::string demangle(const std::string& name);

}  // namespace kir
