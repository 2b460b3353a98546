// The magic scan, once for every format: where a container's magic occurs in
// a range of bytes (internal to libkir/core/discover and binary.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "kir/support/bytes.hpp"

namespace kir::discover {

/// Offset of the first of `magics` in `d` at or after `from`, searching no
/// further than `limit`; d.size() when none.
inline uint64_t next_magic(ByteView d, uint64_t from, uint64_t limit, std::initializer_list<std::string_view> magics) {
  uint64_t best = d.size();
  limit = std::min(limit, d.size());
  if (from >= limit) return best;
  for (std::string_view magic : magics) {
    const void* hit = memmem(d.data() + from, limit - from, magic.data(), magic.size());
    if (hit) best = std::min<uint64_t>(best, static_cast<const uint8_t*>(hit) - d.data());
  }
  return best;
}

/// Calls `at(offset)` for each occurrence of any of `magics` that starts in
/// [from, end) of `d`, in order (a magic may straddle `end`). `at` returns the
/// bytes to skip past the hit (0: one). Returns the offset the next range's
/// search resumes at (end, or past a container that runs over it).
template <class At>
uint64_t find_magic(ByteView d, uint64_t from, uint64_t end, std::initializer_list<std::string_view> magics, At&& at) {
  uint64_t longest = 0;
  for (std::string_view m : magics) longest = std::max<uint64_t>(longest, m.size());
  uint64_t search_end = end + (longest ? longest - 1 : 0);
  uint64_t off = from;
  while (off < end) {
    uint64_t hit = next_magic(d, off, search_end, magics);
    if (hit >= end) break;  // none, or the next range's
    uint64_t skip = at(hit);
    off = hit + std::max<uint64_t>(skip, 1);
  }
  return std::max(off, end);
}

/// The magics, as the scan looks for them.
constexpr char kFatbinMagicBytes[] = {0x50, char(0xED), 0x55, char(0xBA)};
constexpr std::string_view kFatbinMagicText(kFatbinMagicBytes, 4);
constexpr char kBitcodeMagicBytes[] = {'B', 'C', char(0xC0), char(0xDE)};
constexpr std::string_view kBitcodeMagicText(kBitcodeMagicBytes, 4);

}  // namespace kir::discover
