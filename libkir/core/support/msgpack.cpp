#include "kir/support/msgpack.hpp"

#include <cstring>

namespace kir {

namespace {

constexpr int kMaxDepth = 32;
constexpr uint64_t kMaxItems = 1 << 20;

class Reader {
 public:
  explicit Reader(ByteView bytes) : bytes_(bytes) {}

  Status value(MsgpackValue& out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 32");
    uint8_t tag;
    if (!take(tag)) return fail("truncated value");
    using T = MsgpackValue::Type;
    if (tag <= 0x7f) return integer(out, tag);
    if (tag >= 0xe0) return integer(out, int8_t(tag));
    if ((tag & 0xf0) == 0x80) return container(out, T::map, tag & 0x0f, depth);
    if ((tag & 0xf0) == 0x90) return container(out, T::array, tag & 0x0f, depth);
    if ((tag & 0xe0) == 0xa0) return blob(out, T::string, tag & 0x1f);
    switch (tag) {
      case 0xc0: out.type = T::nil; return {};
      case 0xc2: case 0xc3: out.type = T::boolean; out.integer = tag & 1; return {};
      case 0xc4: return sized_blob(out, T::binary, 1);
      case 0xc5: return sized_blob(out, T::binary, 2);
      case 0xc6: return sized_blob(out, T::binary, 4);
      case 0xca: return floating(out, 4);
      case 0xcb: return floating(out, 8);
      case 0xcc: return unsigned_int(out, 1);
      case 0xcd: return unsigned_int(out, 2);
      case 0xce: return unsigned_int(out, 4);
      case 0xcf: return unsigned_int(out, 8);
      case 0xd0: return signed_int(out, 1);
      case 0xd1: return signed_int(out, 2);
      case 0xd2: return signed_int(out, 4);
      case 0xd3: return signed_int(out, 8);
      case 0xd9: return sized_blob(out, T::string, 1);
      case 0xda: return sized_blob(out, T::string, 2);
      case 0xdb: return sized_blob(out, T::string, 4);
      case 0xdc: return sized_container(out, T::array, 2, depth);
      case 0xdd: return sized_container(out, T::array, 4, depth);
      case 0xde: return sized_container(out, T::map, 2, depth);
      case 0xdf: return sized_container(out, T::map, 4, depth);
      default: return fail("unsupported type byte " + hex(tag));
    }
  }

 private:
  Error fail(const std::string& what) const {
    return Error("msgpack at offset " + hex(bytes_.origin(off_)) + ": " + what);
  }

  template <class T>
  bool take(T& v) {
    if (!bytes_.contains(off_, sizeof(T))) return false;
    v = bytes_.read<T>(off_);
    off_ += sizeof(T);
    return true;
  }

  /// A big-endian unsigned integer of `width` bytes.
  bool take_be(unsigned width, uint64_t& v) {
    if (!bytes_.contains(off_, width)) return false;
    v = 0;
    for (unsigned i = 0; i < width; ++i) v = v << 8 | bytes_.data()[off_ + i];
    off_ += width;
    return true;
  }

  Status integer(MsgpackValue& out, int64_t v) {
    out.type = MsgpackValue::Type::integer;
    out.integer = v;
    return {};
  }

  Status unsigned_int(MsgpackValue& out, unsigned width) {
    uint64_t v;
    if (!take_be(width, v)) return fail("truncated integer");
    return integer(out, v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v));
  }

  Status signed_int(MsgpackValue& out, unsigned width) {
    uint64_t v;
    if (!take_be(width, v)) return fail("truncated integer");
    int64_t s = width == 8 ? int64_t(v) : int64_t(v << (64 - 8 * width)) >> (64 - 8 * width);
    return integer(out, s);
  }

  Status floating(MsgpackValue& out, unsigned width) {
    uint64_t v;
    if (!take_be(width, v)) return fail("truncated float");
    out.type = MsgpackValue::Type::floating;
    if (width == 4) {
      uint32_t w = uint32_t(v);
      float f;
      std::memcpy(&f, &w, 4);
      out.floating = f;
    } else {
      std::memcpy(&out.floating, &v, 8);
    }
    return {};
  }

  Status blob(MsgpackValue& out, MsgpackValue::Type type, uint64_t n) {
    if (!bytes_.contains(off_, n)) return fail("string of " + std::to_string(n) + " bytes runs past the end");
    out.type = type;
    out.string = bytes_.sub(off_, n).chars();
    off_ += n;
    return {};
  }

  Status sized_blob(MsgpackValue& out, MsgpackValue::Type type, unsigned width) {
    uint64_t n;
    if (!take_be(width, n)) return fail("truncated length");
    return blob(out, type, n);
  }

  Status container(MsgpackValue& out, MsgpackValue::Type type, uint64_t n, int depth) {
    uint64_t items = type == MsgpackValue::Type::map ? 2 * n : n;
    if (items > kMaxItems || items > bytes_.size() - off_)  // every item takes a byte at least
      return fail("container of " + std::to_string(n) + " items cannot fit");
    out.type = type;
    out.items.resize(items);
    for (MsgpackValue& item : out.items)
      if (Status s = value(item, depth + 1); !s) return s;
    return {};
  }

  Status sized_container(MsgpackValue& out, MsgpackValue::Type type, unsigned width, int depth) {
    uint64_t n;
    if (!take_be(width, n)) return fail("truncated length");
    return container(out, type, n, depth);
  }

  ByteView bytes_;
  uint64_t off_ = 0;
};

}  // namespace

const MsgpackValue* MsgpackValue::get(std::string_view key) const {
  if (type != Type::map) return nullptr;
  for (size_t i = 0; i + 1 < items.size(); i += 2)
    if (items[i].type == Type::string && items[i].string == key) return &items[i + 1];
  return nullptr;
}

Expected<MsgpackValue> parse_msgpack(ByteView bytes) {
  MsgpackValue v;
  Reader r(bytes);
  if (Status s = r.value(v, 0); !s) return s.error();
  return v;
}

}  // namespace kir
