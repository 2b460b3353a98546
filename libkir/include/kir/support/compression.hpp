// Decompression of the codecs device images use (system liblz4, libzstd).
// Every decoder is told the size the container claims, refuses claims over a
// cap, and checks that the output is exactly that long.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

/// A reusable output buffer for decoding many images in a row: it grows,
/// never shrinks, and is never zero-filled (the decoder overwrites it).
class Scratch {
 public:
  uint8_t* reserve(uint64_t size);

 private:
  std::unique_ptr<uint8_t[]> data_;
  uint64_t capacity_ = 0;
};

/// A raw LZ4 block (no frame header) that decodes to exactly `size` bytes at `out`.
Status decompress_lz4_block(ByteView src, uint64_t size, uint8_t* out);

/// One or more zstd frames that decode to exactly `size` bytes at `out`.
Status decompress_zstd(ByteView src, uint64_t size, uint8_t* out);

}  // namespace kir
