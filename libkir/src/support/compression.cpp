#include "kir/support/compression.hpp"

#include <lz4.h>
#include <zstd.h>

#include <climits>

namespace kir {

Expected<std::vector<uint8_t>> decompress_lz4_block(ByteView src, uint64_t size) {
  if (src.size() > INT_MAX || size > INT_MAX)
    return Error("LZ4 block too large for the LZ4 library (" + hex(src.size()) + " -> " +
                 hex(size) + " bytes)");
  std::vector<uint8_t> out(size);
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.data()),
                              reinterpret_cast<char*>(out.data()), static_cast<int>(src.size()),
                              static_cast<int>(size));
  if (n < 0)
    return Error("LZ4 block of " + hex(src.size()) + " bytes is corrupt (decoder error at " +
                 "input offset " + hex(uint64_t(-(int64_t)n)) + ")");
  if (static_cast<uint64_t>(n) != size)
    return Error("LZ4 block decodes to " + hex(uint64_t(n)) + " bytes, but the header claims " +
                 hex(size));
  return out;
}

Expected<std::vector<uint8_t>> decompress_zstd(ByteView src, uint64_t size) {
  std::vector<uint8_t> out(size);
  size_t n = ZSTD_decompress(out.data(), out.size(), src.data(), src.size());
  if (ZSTD_isError(n))
    return Error(std::string("zstd data of ") + hex(src.size()) +
                 " bytes cannot be decoded to the claimed " + hex(size) +
                 " bytes: " + ZSTD_getErrorName(n));
  if (n != size)
    return Error("zstd data decodes to " + hex(n) + " bytes, but the header claims " + hex(size));
  return out;
}

}  // namespace kir
