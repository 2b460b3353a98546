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

/// Offset of the first occurrence of the 4-byte `magic` at or after `from` (and
/// below `limit`) that starts on an `align`-byte boundary of the file (d.origin() +
/// offset), d.size() when none. Containers a compiler or linker puts in a data
/// section are aligned (a fatbin: its header's 64-bit fields; nvcc's and every
/// NVIDIA library's, 8 bytes), so the default data-section search reads one word
/// in `align` instead of searching every byte (issue 26: 4x faster on cuFFT's .data).
inline uint64_t next_aligned_magic(ByteView d, uint64_t from, uint64_t limit, std::string_view magic, uint64_t align) {
  limit = std::min(limit, d.size());
  uint32_t want = 0;
  std::memcpy(&want, magic.data(), 4);
  uint64_t off = from + (align - (d.origin() + from) % align) % align;
  const uint8_t* p = d.data();
  for (; off + 4 * align + 4 <= limit; off += 4 * align) {  // four words a step: no branch per word
    uint32_t a, b, c, e;
    std::memcpy(&a, p + off, 4);
    std::memcpy(&b, p + off + align, 4);
    std::memcpy(&c, p + off + 2 * align, 4);
    std::memcpy(&e, p + off + 3 * align, 4);
    if ((a == want) | (b == want) | (c == want) | (e == want)) break;
  }
  for (; off + 4 <= limit; off += align) {
    uint32_t v;
    std::memcpy(&v, p + off, 4);
    if (v == want) return off;
  }
  return d.size();
}

/// find_magic for one 4-byte magic on `align`-byte boundaries (next_aligned_magic).
template <class At>
uint64_t find_aligned_magic(ByteView d, uint64_t from, uint64_t end, std::string_view magic, uint64_t align, At&& at) {
  uint64_t off = from;
  while (off < end) {
    uint64_t hit = next_aligned_magic(d, off, end + 3, magic, align);
    if (hit >= end) break;
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
