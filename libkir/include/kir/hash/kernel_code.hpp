// The static-hash policy: which bytes a kernel's static hash covers. ONE
// function, called by every surface that names a kernel — `kir hash` (through
// the bindings), the hook layer's registry at registration, the recorder (which
// stores the hook's value) and the replay planner (which recomputes it from the
// record's image) — so they agree by construction (docs/hashing.md, "Which code").
//
// For kernel K of a device image whose code is `code` (a DeviceCode decoded
// from that image, with its embedded IR):
//   1. the IR module embedded for K alone (HIP `.jit.bitcode.<K>.…` sections), else
//   2. every translation-unit module embedded in the image (CUDA `_jit_bitcode_*`
//      globals, HIP `.jit.bitcode.tu…` / `.jit.bitcode.lto…` sections) — with
//      relocatable device code a linked image holds one per unit, and its
//      kernels depend on all of them — with code kind "ir", else
//   3. the image itself, with the image's own code kind (cubin, ptx, code-object).
// IR found elsewhere in a binary (`.llvmbc`, offloading-binary bitcode) is not
// part of any device image's code and never enters a static hash.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "kir/device_code.hpp"
#include "kir/hash/hash.hpp"
#include "kir/model.hpp"

namespace kir {

/// What a kernel's static hash covers.
struct KernelCode {
  CodeKind kind = CodeKind::unknown;
  std::vector<uint32_t> modules;  // kind == ir: indices into DeviceCode::ir, in image order
  std::vector<Hash128> digests;   // the MODULE records' digests (before sorting)
};

/// The policy above. Rule 3 needs `code.image_digest` (Binary::device_code with
/// digests, or set by the caller): without it, and without IR, kind is unknown.
KernelCode kernel_code(const DeviceCode& code, std::string_view kernel);

/// The kernel's static hash under that policy; nullopt when kind is unknown.
std::optional<Hash128> kernel_static_hash(const DeviceCode& code, std::string_view kernel);

}  // namespace kir
