// AMDGPU code objects (ELF, e_machine 224): kernels from the metadata notes
// (`NT_AMDGPU_METADATA`, MessagePack), else from `.kd` descriptors; the target
// id; IR the Proteus pass embedded as `.jit.bitcode*` sections.
#pragma once

#include "kir/device_code.hpp"

namespace kir {

/// Kernels (from the metadata note: parameters, registers, LDS, scratch; else
/// from `.kd` descriptors), the target id, the device variables (defined global
/// objects, less `.kd` descriptors) and embedded IR of an AMDGPU code object.
Expected<DeviceCode> parse_code_object(ByteView elf);

}  // namespace kir
