// A registered kernel's device code for clients (kir_hook_kernel_code,
// kir_hook_kernel_code_unit, kir_hook_kernel_ir): decoded from its live
// registration on first request, under that registration's code lock.
#pragma once

#include <cstddef>

#include "kir/hooks.h"
#include "registry.hpp"

namespace kir::hook {

/// The device code of a registered kernel (KIR_CODE_*), decoded on first request.
bool kernel_code(Registry& registry, const kir_hook_kernel* kernel, int which, kir_hook_code& out);
/// The relocatable units of a device-linked kernel's registration: their count,
/// and the PTX of unit `index` (decoded on first request).
size_t kernel_code_units(Registry& registry, const kir_hook_kernel* kernel);
bool kernel_code_unit(Registry& registry, const kir_hook_kernel* kernel, size_t index, kir_hook_code& out);
/// The embedded IR modules of a kernel's code (API 4), as its static hash covers them.
size_t kernel_ir_count(Registry& registry, const kir_hook_kernel* kernel);
bool kernel_ir(Registry& registry, const kir_hook_kernel* kernel, size_t index, kir_bytes& out);

/// Proteus's 64-bit static hash of `kernel` as Proteus's runtime computes it when the
/// kernel's registration is a HIP code object the Proteus pass built (kir/hash/proteus.hpp:
/// JitEngineDeviceHIP getModuleHash, JITKernelInfo::createStaticHash): true and `out`,
/// false when it has no `.jit.bitcode*` section, is not a code object, or is unloaded.
bool kernel_proteus_hash(Registry& registry, const kir_hook_kernel* kernel, bool llvm20_or_newer, uint64_t& out);

}  // namespace kir::hook
