// The static-hash policy (kir/hash/kernel_code.hpp).
#include "kir/hash/kernel_code.hpp"

namespace kir {

KernelCode kernel_code(const DeviceCode& code, std::string_view kernel) {
  KernelCode out;
  for (uint32_t i = 0; i < code.ir.size(); ++i)
    if (code.ir[i].kernel == kernel) {  // 1. its own module
      out.kind = CodeKind::ir;
      out.modules = {i};
      out.digests = {code.ir[i].digest};
      return out;
    }
  for (uint32_t i = 0; i < code.ir.size(); ++i)
    if (code.ir[i].kernel.empty()) {  // 2. the image's translation units
      out.modules.push_back(i);
      out.digests.push_back(code.ir[i].digest);
    }
  if (!out.modules.empty()) {
    out.kind = CodeKind::ir;
    return out;
  }
  if (code.image_digest) {  // 3. the image
    out.kind = code_kind_of(code.kind);
    out.digests = {*code.image_digest};
  }
  return out;
}

std::optional<Hash128> kernel_static_hash(const DeviceCode& code, std::string_view kernel) {
  KernelCode k = kernel_code(code, kernel);
  if (k.kind == CodeKind::unknown) return std::nullopt;
  return static_hash_of_digests(kernel, name(k.kind), std::move(k.digests));
}

}  // namespace kir
