// ByteView: a non-owning view over bytes someone else owns (a mapped file, a
// decompressed buffer), with the bounds checks every parser uses.
//
// All range checks are written as `n <= size - off` after `off <= size`, so
// they cannot overflow whatever the file claims. A view remembers the offset
// of its first byte in the outermost buffer (the file), so messages can name
// absolute file offsets even deep inside a container.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kir/support/error.hpp"

namespace kir {

class ByteView {
 public:
  ByteView() = default;
  ByteView(const uint8_t* data, uint64_t size, uint64_t origin = 0) : data_(data), size_(size), origin_(origin) {}

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  /// Offset of byte `off` of this view in the outermost buffer.
  uint64_t origin(uint64_t off = 0) const { return origin_ + off; }

  /// True when [off, off + n) lies inside the view (overflow-safe).
  bool contains(uint64_t off, uint64_t n) const { return off <= size_ && n <= size_ - off; }

  /// Unchecked sub-view; call contains() first.
  ByteView sub(uint64_t off, uint64_t n) const { return ByteView(data_ + off, n, origin_ + off); }
  /// Unchecked: the bytes from `off` to the end.
  ByteView from(uint64_t off) const { return sub(off, size_ - off); }

  /// Checked sub-view: an error naming `what` when it does not fit.
  Expected<ByteView> slice(uint64_t off, uint64_t n, const char* what) const;

  /// Unchecked little-endian read; call contains() first.
  template <class T>
  T read(uint64_t off) const {
    T v;
    std::memcpy(&v, data_ + off, sizeof(T));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = byteswap(v);
#endif
    return v;
  }

  std::string_view chars() const { return std::string_view(reinterpret_cast<const char*>(data_), size_); }

  /// The NUL-terminated string starting at `off` (up to the end of the view).
  std::string_view c_string(uint64_t off) const;

  /// True when the view starts with `magic`.
  bool starts_with(std::string_view magic) const {
    return size_ >= magic.size() && std::memcmp(data_, magic.data(), magic.size()) == 0;
  }

 private:
  template <class T>
  static T byteswap(T v) {
    T r;
    auto* s = reinterpret_cast<uint8_t*>(&v);
    auto* d = reinterpret_cast<uint8_t*>(&r);
    for (size_t i = 0; i < sizeof(T); ++i) d[i] = s[sizeof(T) - 1 - i];
    return r;
  }

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t origin_ = 0;
};

/// Round `v` up to a multiple of `a` (a power of two), saturating.
inline uint64_t align_up(uint64_t v, uint64_t a) {
  uint64_t r = (v + a - 1) & ~(a - 1);
  return r < v ? UINT64_MAX : r;
}

}  // namespace kir
