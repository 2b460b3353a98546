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

/// The type of an argument value: the ARG and CAPTURE records' type byte
/// (docs/hashing.md), kir.h's KIR_ARG_* and kir_jit_arg.type. Values are never
/// renumbered; 0 is no type.
enum class ArgType : uint8_t {
  i8 = 1,   // "i8"
  i16,      // "i16"
  i32,      // "i32"
  i64,      // "i64"
  u8,       // "u8"
  u16,      // "u16"
  u32,      // "u32"
  u64,      // "u64"
  f16,      // "f16": IEEE half
  bf16,     // "bf16": bfloat16
  f32,      // "f32"
  f64,      // "f64"
  ptr,      // "ptr": a 64-bit device address
  bytes,    // "bytes": an object's bytes (no fixed size)
  boolean,  // "bool": one byte, 0 or 1
};

/// What a runtime-constant argument is (kir.h's KIR_JIT_*, kir_jit_arg.kind).
enum class JitArgKind : uint8_t {
  scalar = 0,  // "scalar": the argument's own bytes, of its type
  array = 1,   // "array": elements of its type, through a pointer or by value
  object = 2,  // "object": a struct's bytes, through a pointer or by value
  vector = 3,  // "vector": a vector-typed argument's elements, its own bytes (Proteus VECTOR)
};

/// The container format device code is found in (docs/containers.md).
enum class ContainerFormat : uint8_t {
  cuda_fatbin,      // "cuda-fatbin": 0xBA55ED50 container
  offload_bundle,   // "offload-bundle": __CLANG_OFFLOAD_BUNDLE__ (or CCOB, compressed)
  object_bundle,    // "object-bundle": __CLANG_OFFLOAD_BUNDLE__<id> sections of a .o
  offload_binary,   // "offload-binary": LLVM offloading binary, magic 10 FF 10 AD
  bitcode_section,  // "bitcode-section": .llvmbc / .llvm.lto embedded LLVM bitcode modules
  device_elf,       // "device-elf": a file that is itself one device image
};

/// How stored bytes are compressed: an image (kir.h's KIR_COMPRESSION_*, the
/// first four values) or a compressed container (an offload bundle's CCOB codec).
enum class Codec : uint8_t {
  none = 0,     // "none": stored as is
  lz4 = 1,      // "lz4": a fatbin entry's LZ4
  zstd = 2,     // "zstd"
  unknown = 3,  // "unknown": a compression kir does not know
  zlib = 4,     // "zlib": a compressed offload bundle's
};

const char* name(ImageKind kind);
const char* name(CodeKind kind);
const char* name(TargetKind kind);
const char* name(AllocationKind kind);
/// "i8" ... "bool"; "?" for a value that is no ArgType.
const char* name(ArgType type);
const char* name(JitArgKind kind);
const char* name(ContainerFormat format);
const char* name(Codec codec);

/// Name -> enum; nullopt for names not in the table.
std::optional<ImageKind> image_kind_from_name(std::string_view name);
std::optional<CodeKind> code_kind_from_name(std::string_view name);
std::optional<TargetKind> target_kind_from_name(std::string_view name);
std::optional<AllocationKind> allocation_kind_from_name(std::string_view name);
std::optional<ArgType> arg_type_from_name(std::string_view name);
std::optional<JitArgKind> jit_arg_kind_from_name(std::string_view name);
std::optional<ContainerFormat> container_format_from_name(std::string_view name);
std::optional<Codec> codec_from_name(std::string_view name);

/// An ArgType's value size in bytes: 0 for bytes (no fixed size) and for a
/// value that is no ArgType.
unsigned size_of(ArgType type);
/// The little-endian Python struct format of an ArgType's value ("<i", "<e",
/// "<Q" ...): "" where there is none (bf16, bytes, a value that is no ArgType).
const char* struct_format(ArgType type);
/// Whether `value` is an ArgType's value (1..15).
constexpr bool is_arg_type(unsigned value) { return value >= 1 && value <= 15; }

/// The code kind of a device image's own code (cubin, ptx, code-object), else unknown.
CodeKind code_kind_of(ImageKind kind);
/// A target's family from its text: "sm_90"/"compute_90" cuda, "gfx…" amdgpu.
TargetKind target_kind_of(std::string_view target);

/// The number of members of each enum, for tables and bindings.
constexpr unsigned kImageKinds = 12, kCodeKinds = 5, kTargetKinds = 4, kAllocationKinds = 5;
/// ArgType's members are 1..kArgTypes (0 is none); the others' are 0..count-1.
constexpr unsigned kArgTypes = 15, kJitArgKinds = 4, kContainerFormats = 6, kCodecs = 5;

}  // namespace kir
