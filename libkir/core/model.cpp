// The name tables of kir/model.hpp: the only place a kind becomes text.
#include "kir/model.hpp"

#include "kir/cuda/fatbin.hpp"
#include "kir/hooks.h"
#include "kir/kir.h"

namespace kir {

// The C ABI keeps its numeric constants (kir.h, hooks.h); they are these enums' values.
#define KIR_SAME(c, e) static_assert((c) == static_cast<unsigned>(e), #c " is " #e)
KIR_SAME(KIR_ARG_I8, ArgType::i8);
KIR_SAME(KIR_ARG_I16, ArgType::i16);
KIR_SAME(KIR_ARG_I32, ArgType::i32);
KIR_SAME(KIR_ARG_I64, ArgType::i64);
KIR_SAME(KIR_ARG_U8, ArgType::u8);
KIR_SAME(KIR_ARG_U16, ArgType::u16);
KIR_SAME(KIR_ARG_U32, ArgType::u32);
KIR_SAME(KIR_ARG_U64, ArgType::u64);
KIR_SAME(KIR_ARG_F16, ArgType::f16);
KIR_SAME(KIR_ARG_BF16, ArgType::bf16);
KIR_SAME(KIR_ARG_F32, ArgType::f32);
KIR_SAME(KIR_ARG_F64, ArgType::f64);
KIR_SAME(KIR_ARG_PTR, ArgType::ptr);
KIR_SAME(KIR_ARG_BYTES, ArgType::bytes);
KIR_SAME(KIR_ARG_BOOL, ArgType::boolean);
KIR_SAME(KIR_ARG_BOOL, kArgTypes);
KIR_SAME(KIR_JIT_SCALAR, JitArgKind::scalar);
KIR_SAME(KIR_JIT_ARRAY, JitArgKind::array);
KIR_SAME(KIR_JIT_OBJECT, JitArgKind::object);
KIR_SAME(KIR_JIT_VECTOR, JitArgKind::vector);
KIR_SAME(KIR_JIT_VECTOR + 1, kJitArgKinds);
KIR_SAME(KIR_CODE_KIND_UNKNOWN, CodeKind::unknown);
KIR_SAME(KIR_CODE_KIND_IR, CodeKind::ir);
KIR_SAME(KIR_CODE_KIND_CUBIN, CodeKind::cubin);
KIR_SAME(KIR_CODE_KIND_PTX, CodeKind::ptx);
KIR_SAME(KIR_CODE_KIND_CODE_OBJECT, CodeKind::code_object);
KIR_SAME(KIR_CODE_KIND_CODE_OBJECT + 1, kCodeKinds);
KIR_SAME(KIR_COMPRESSION_NONE, Codec::none);
KIR_SAME(KIR_COMPRESSION_LZ4, Codec::lz4);
KIR_SAME(KIR_COMPRESSION_ZSTD, Codec::zstd);
KIR_SAME(KIR_COMPRESSION_UNKNOWN, Codec::unknown);
KIR_SAME(KIR_ALLOC_DEVICE, AllocationKind::device);
KIR_SAME(KIR_ALLOC_MANAGED, AllocationKind::managed);
KIR_SAME(KIR_ALLOC_HOST_PINNED, AllocationKind::host_pinned);
// kir_image_info.kind (deprecated): a fatbin entry's raw kind.
KIR_SAME(KIR_IMAGE_PTX, FatbinEntryKind::ptx);
KIR_SAME(KIR_IMAGE_CUBIN, FatbinEntryKind::cubin);
KIR_SAME(KIR_IMAGE_OLD_CUBIN, FatbinEntryKind::old_cubin);
KIR_SAME(KIR_IMAGE_LTO_IR, FatbinEntryKind::lto_ir);
#undef KIR_SAME

namespace {

constexpr const char* kImageKindNames[kImageKinds] = {"unknown",   "cubin",       "ptx",     "lto-ir",
                                                      "old-cubin", "code-object", "bitcode", "fatbin",
                                                      "spirv",     "object",      "host",    "empty"};
constexpr const char* kCodeKindNames[kCodeKinds] = {"unknown", "ir", "cubin", "ptx", "code-object"};
constexpr const char* kTargetKindNames[kTargetKinds] = {"none", "cuda", "amdgpu", "host"};
constexpr const char* kAllocationKindNames[kAllocationKinds] = {"unknown", "device", "managed", "host-pinned",
                                                                "global"};

constexpr const char* kJitArgKindNames[kJitArgKinds] = {"scalar", "array", "object", "vector"};
constexpr const char* kContainerFormatNames[kContainerFormats] = {"cuda-fatbin",    "offload-bundle",  "object-bundle",
                                                                  "offload-binary", "bitcode-section", "device-elf"};
constexpr const char* kCodecNames[kCodecs] = {"none", "lz4", "zstd", "unknown", "zlib"};

/// ArgType by value: its name, value size and Python struct format (index 0: no type).
struct ArgTypeInfo {
  const char* name;
  unsigned size;
  const char* format;
};
constexpr ArgTypeInfo kArgTypeInfo[kArgTypes + 1] = {
    {"?", 0, ""},     {"i8", 1, "<b"},  {"i16", 2, "<h"}, {"i32", 4, "<i"}, {"i64", 8, "<q"}, {"u8", 1, "<B"},
    {"u16", 2, "<H"}, {"u32", 4, "<I"}, {"u64", 8, "<Q"}, {"f16", 2, "<e"}, {"bf16", 2, ""},  {"f32", 4, "<f"},
    {"f64", 8, "<d"}, {"ptr", 8, "<Q"}, {"bytes", 0, ""}, {"bool", 1, "<?"}};
static_assert(unsigned(ArgType::boolean) == kArgTypes, "kArgTypes: the last ArgType");

const ArgTypeInfo& info(ArgType type) {
  unsigned i = unsigned(type);
  return kArgTypeInfo[is_arg_type(i) ? i : 0];
}

template <unsigned N>
const char* lookup(const char* const (&table)[N], unsigned index) {
  return index < N ? table[index] : table[0];
}

template <class Enum, unsigned N>
std::optional<Enum> find(const char* const (&table)[N], std::string_view name) {
  for (unsigned i = 0; i < N; ++i)
    if (name == table[i]) return static_cast<Enum>(i);
  return std::nullopt;
}

}  // namespace

const char* name(ImageKind kind) { return lookup(kImageKindNames, unsigned(kind)); }
const char* name(CodeKind kind) { return lookup(kCodeKindNames, unsigned(kind)); }
const char* name(TargetKind kind) { return lookup(kTargetKindNames, unsigned(kind)); }
const char* name(AllocationKind kind) { return lookup(kAllocationKindNames, unsigned(kind)); }

const char* name(ArgType type) { return info(type).name; }
const char* name(JitArgKind kind) { return lookup(kJitArgKindNames, unsigned(kind)); }
const char* name(ContainerFormat format) { return lookup(kContainerFormatNames, unsigned(format)); }
const char* name(Codec codec) {
  unsigned i = unsigned(codec);
  return i < kCodecs ? kCodecNames[i] : name(Codec::unknown);
}
unsigned size_of(ArgType type) { return info(type).size; }
const char* struct_format(ArgType type) { return info(type).format; }

std::optional<ImageKind> image_kind_from_name(std::string_view n) { return find<ImageKind>(kImageKindNames, n); }
std::optional<CodeKind> code_kind_from_name(std::string_view n) { return find<CodeKind>(kCodeKindNames, n); }
std::optional<TargetKind> target_kind_from_name(std::string_view n) { return find<TargetKind>(kTargetKindNames, n); }
std::optional<AllocationKind> allocation_kind_from_name(std::string_view n) {
  return find<AllocationKind>(kAllocationKindNames, n);
}

std::optional<ArgType> arg_type_from_name(std::string_view n) {
  for (unsigned i = 1; i <= kArgTypes; ++i)
    if (n == kArgTypeInfo[i].name) return static_cast<ArgType>(i);
  return std::nullopt;
}
std::optional<JitArgKind> jit_arg_kind_from_name(std::string_view n) { return find<JitArgKind>(kJitArgKindNames, n); }
std::optional<ContainerFormat> container_format_from_name(std::string_view n) {
  return find<ContainerFormat>(kContainerFormatNames, n);
}
std::optional<Codec> codec_from_name(std::string_view n) { return find<Codec>(kCodecNames, n); }

CodeKind code_kind_of(ImageKind kind) {
  switch (kind) {
    case ImageKind::cubin: return CodeKind::cubin;
    case ImageKind::ptx: return CodeKind::ptx;
    case ImageKind::code_object: return CodeKind::code_object;
    default: return CodeKind::unknown;
  }
}

TargetKind target_kind_of(std::string_view target) {
  if (target.rfind("sm_", 0) == 0 || target.rfind("compute_", 0) == 0) return TargetKind::cuda;
  if (target.rfind("gfx", 0) == 0) return TargetKind::amdgpu;
  if (target.empty()) return TargetKind::none;
  return TargetKind::host;
}

}  // namespace kir
