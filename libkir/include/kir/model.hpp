// The vocabulary of kir's domain model: every kind of thing kir names, as a
// typed enum with ONE name table each. The names are the JSON names (docs/
// json-schema.md, docs/record-format.md) and the words the CLI prints; the
// bindings export each enum to Python (kir.model) with these names as values.
// Nothing outside this file turns a kind into text or back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kir {

/// What an image (one entry of a container, or a file that is one image) is.
enum class ImageKind : uint8_t {
  unknown,      // "unknown": bytes kir does not recognize
  cubin,        // "cubin": CUDA ELF (e_machine 190)
  ptx,          // "ptx": PTX text
  lto_ir,       // "lto-ir": NVVM LTO-IR (opaque)
  old_cubin,    // "old-cubin": fatbin entry kind 4
  code_object,  // "code-object": AMDGPU ELF (e_machine 224)
  bitcode,      // "bitcode": LLVM bitcode
  fatbin,       // "fatbin": a CUDA fatbin inside an offloading binary
  spirv,        // "spirv": SPIR-V inside an offloading binary
  object,       // "object": a host ELF object
  host,         // "host": an offload bundle's host entry
  empty,        // "empty": an entry with no bytes
};

/// What a kernel's static hash covers (docs/hashing.md, CODE_KIND record).
enum class CodeKind : uint8_t {
  unknown,      // "unknown": the hook knows the kernel but not its code
  ir,           // "ir": the LLVM IR module(s) that define it
  cubin,        // "cubin"
  ptx,          // "ptx"
  code_object,  // "code-object"
};

/// The family of an image's target: the target string itself ("sm_90",
/// "gfx90a:xnack+") stays a string, its family is one of these.
enum class TargetKind : uint8_t {
  none,    // "none": no target (host entries, bitcode without a triple)
  cuda,    // "cuda": an NVIDIA SM ("sm_90")
  amdgpu,  // "amdgpu": an AMDGPU target id ("gfx90a:xnack+")
  host,    // "host": a host triple
};

/// A device allocation's kind, as the hook layer tracks it (values are
/// kir/hooks.h's KIR_ALLOC_*).
enum class AllocationKind : uint8_t {
  unknown = 0,      // "unknown"
  device = 1,       // "device": cudaMalloc, cuMemAlloc, hipMalloc ...
  managed = 2,      // "managed": cudaMallocManaged
  host_pinned = 3,  // "host-pinned": cudaMallocHost / cudaHostAlloc
  global = 4,       // "global": a module's __device__ / __constant__ variable (records)
};

const char* name(ImageKind kind);
const char* name(CodeKind kind);
const char* name(TargetKind kind);
const char* name(AllocationKind kind);

/// Name -> enum; nullopt for names not in the table.
std::optional<ImageKind> image_kind_from_name(std::string_view name);
std::optional<CodeKind> code_kind_from_name(std::string_view name);
std::optional<TargetKind> target_kind_from_name(std::string_view name);
std::optional<AllocationKind> allocation_kind_from_name(std::string_view name);

/// The code kind of a device image's own code (cubin, ptx, code-object), else unknown.
CodeKind code_kind_of(ImageKind kind);
/// A target's family from its text: "sm_90"/"compute_90" cuda, "gfx…" amdgpu.
TargetKind target_kind_of(std::string_view target);

/// The number of members of each enum, for tables and bindings.
constexpr unsigned kImageKinds = 12, kCodeKinds = 5, kTargetKinds = 4, kAllocationKinds = 5;

}  // namespace kir
