// Decompression of the codecs device images use (system liblz4, libzstd).
// Every decoder is told the size the container claims, refuses claims over a
// cap, and checks that the output is exactly that long.
#pragma once

#include <cstdint>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

/// A raw LZ4 block (no frame header) that decodes to exactly `size` bytes.
Expected<std::vector<uint8_t>> decompress_lz4_block(ByteView src, uint64_t size);

/// One or more zstd frames that decode to exactly `size` bytes.
Expected<std::vector<uint8_t>> decompress_zstd(ByteView src, uint64_t size);

}  // namespace kir
