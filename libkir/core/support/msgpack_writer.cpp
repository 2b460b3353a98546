// MessagePack writer (kir/support/msgpack.hpp): the shortest encoding of each value.
#include <cstring>

#include "kir/support/msgpack.hpp"

namespace kir {

void MsgpackWriter::put_be(uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) put(uint8_t(value >> (8 * i)));
}

void MsgpackWriter::header(uint8_t fix_base, uint32_t fix_limit, uint8_t tag16, uint8_t tag32, uint32_t count) {
  if (count < fix_limit) {
    put(uint8_t(fix_base | count));
  } else if (count <= 0xffff) {
    put(tag16);
    put_be(count, 2);
  } else {
    put(tag32);
    put_be(count, 4);
  }
}

MsgpackWriter& MsgpackWriter::nil() {
  put(0xc0);
  return *this;
}

MsgpackWriter& MsgpackWriter::boolean(bool value) {
  put(value ? 0xc3 : 0xc2);
  return *this;
}

MsgpackWriter& MsgpackWriter::uint(uint64_t value) {
  if (value < 0x80) {
    put(uint8_t(value));
  } else if (value <= 0xff) {
    put(0xcc), put_be(value, 1);
  } else if (value <= 0xffff) {
    put(0xcd), put_be(value, 2);
  } else if (value <= 0xffffffffu) {
    put(0xce), put_be(value, 4);
  } else {
    put(0xcf), put_be(value, 8);
  }
  return *this;
}

MsgpackWriter& MsgpackWriter::sint(int64_t value) {
  if (value >= 0) return uint(uint64_t(value));
  if (value >= -32) {
    put(uint8_t(value));
  } else if (value >= INT8_MIN) {
    put(0xd0), put_be(uint64_t(value), 1);
  } else if (value >= INT16_MIN) {
    put(0xd1), put_be(uint64_t(value), 2);
  } else if (value >= INT32_MIN) {
    put(0xd2), put_be(uint64_t(value), 4);
  } else {
    put(0xd3), put_be(uint64_t(value), 8);
  }
  return *this;
}

MsgpackWriter& MsgpackWriter::f64(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put(0xcb);
  put_be(bits, 8);
  return *this;
}

MsgpackWriter& MsgpackWriter::str(std::string_view text) {
  uint32_t n = uint32_t(text.size());
  if (n < 32) {
    put(uint8_t(0xa0 | n));
  } else if (n <= 0xff) {
    put(0xd9), put_be(n, 1);
  } else if (n <= 0xffff) {
    put(0xda), put_be(n, 2);
  } else {
    put(0xdb), put_be(n, 4);
  }
  out_.insert(out_.end(), text.begin(), text.end());
  return *this;
}

MsgpackWriter& MsgpackWriter::bin(const void* data, size_t size) {
  uint32_t n = uint32_t(size);
  if (n <= 0xff) {
    put(0xc4), put_be(n, 1);
  } else if (n <= 0xffff) {
    put(0xc5), put_be(n, 2);
  } else {
    put(0xc6), put_be(n, 4);
  }
  const auto* p = static_cast<const uint8_t*>(data);
  out_.insert(out_.end(), p, p + size);
  return *this;
}

MsgpackWriter& MsgpackWriter::array(uint32_t count) {
  header(0x90, 16, 0xdc, 0xdd, count);
  return *this;
}

MsgpackWriter& MsgpackWriter::map(uint32_t count) {
  header(0x80, 16, 0xde, 0xdf, count);
  return *this;
}

MsgpackWriter& MsgpackWriter::insert_map(size_t position, uint32_t count) {
  MsgpackWriter head;
  head.map(count);
  out_.insert(out_.begin() + std::ptrdiff_t(position), head.out_.begin(), head.out_.end());
  return *this;
}

}  // namespace kir
