// MD5 (RFC 1321). Clang's compressed offload bundles store the low 64 bits of
// the MD5 of the uncompressed bundle; kir checks it. Not for security.
#pragma once

#include <array>
#include <cstdint>

#include "kir/support/bytes.hpp"

namespace kir {

/// The 16-byte MD5 digest of `data`.
std::array<uint8_t, 16> md5(ByteView data);

/// The digest's first 8 bytes as a little-endian integer — what clang stores.
uint64_t md5_low64(ByteView data);

}  // namespace kir
