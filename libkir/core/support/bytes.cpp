#include "kir/support/bytes.hpp"

namespace kir {

Expected<ByteView> ByteView::slice(uint64_t off, uint64_t n, const char* what) const {
  if (contains(off, n)) return sub(off, n);
  if (off > size_)
    return Error(
        ErrorCode::out_of_bounds,
        std::string(what) + " at offset " + hex(off) + " starts past the end of its buffer (size " + hex(size_) + ")",
        origin(off));
  return Error(ErrorCode::out_of_bounds,
               std::string(what) + " at offset " + hex(off) + " (size " + hex(n) +
                   ") runs past the end of its buffer (" + hex(size_ - off) + " bytes left)",
               origin(off));
}

std::string_view ByteView::c_string(uint64_t off) const {
  if (off >= size_) return {};
  const void* nul = std::memchr(data_ + off, 0, size_ - off);
  uint64_t end = nul ? static_cast<uint64_t>(static_cast<const uint8_t*>(nul) - data_) : size_;
  return std::string_view(reinterpret_cast<const char*>(data_ + off), end - off);
}

}  // namespace kir
