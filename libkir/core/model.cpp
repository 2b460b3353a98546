// The name tables of kir/model.hpp: the only place a kind becomes text.
#include "kir/model.hpp"

namespace kir {

namespace {

constexpr const char* kImageKindNames[kImageKinds] = {
    "unknown", "cubin", "ptx", "lto-ir", "old-cubin", "code-object",
    "bitcode", "fatbin", "spirv", "object", "host", "empty"};
constexpr const char* kCodeKindNames[kCodeKinds] = {"unknown", "ir", "cubin", "ptx", "code-object"};
constexpr const char* kTargetKindNames[kTargetKinds] = {"none", "cuda", "amdgpu", "host"};
constexpr const char* kAllocationKindNames[kAllocationKinds] = {"unknown", "device", "managed",
                                                                "host-pinned", "global"};

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

std::optional<ImageKind> image_kind_from_name(std::string_view n) {
  return find<ImageKind>(kImageKindNames, n);
}
std::optional<CodeKind> code_kind_from_name(std::string_view n) {
  return find<CodeKind>(kCodeKindNames, n);
}
std::optional<TargetKind> target_kind_from_name(std::string_view n) {
  return find<TargetKind>(kTargetKindNames, n);
}
std::optional<AllocationKind> allocation_kind_from_name(std::string_view n) {
  return find<AllocationKind>(kAllocationKindNames, n);
}

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
