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

/// A raw LZ4 block (no frame header) that decodes to exactly `size` bytes,
/// decoded into `scratch`. A claim beyond LZ4's 255:1 ratio is refused before
/// anything is allocated.
Expected<ByteView> decompress_lz4_block(ByteView src, uint64_t size, Scratch& scratch);

/// One or more zstd frames that decode to exactly `size` bytes, decoded into
/// `scratch`. Input that is no zstd frame, or whose frame header records a
/// larger size, is refused before anything is allocated.
Expected<ByteView> decompress_zstd(ByteView src, uint64_t size, Scratch& scratch);

/// A zlib stream (RFC 1950, as zlib's compress() writes) that decodes to
/// exactly `size` bytes, decoded into `scratch`.
Expected<ByteView> decompress_zlib(ByteView src, uint64_t size, Scratch& scratch);

/// `src` as one zstd frame (with its content size) at `level`, appended to `out`
/// after `out`'s first `offset` bytes; returns the frame's size.
Expected<uint64_t> compress_zstd(ByteView src, int level, std::vector<uint8_t>& out, uint64_t offset);

}  // namespace kir
