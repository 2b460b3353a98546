// PTX text: `.entry` kernels with their parameter sizes and offsets, and globals.
#pragma once

#include "kir/device_code.hpp"

namespace kir {

/// Kernels (`.entry`, with parameter sizes and offsets) and globals of PTX text.
Expected<DeviceCode> parse_ptx(ByteView ptx);

}  // namespace kir
