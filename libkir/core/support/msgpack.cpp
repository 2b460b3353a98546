#include "kir/support/msgpack.hpp"

#include <algorithm>
#include <cstring>
#include <string>

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
      case 0xc2:
      case 0xc3:
        out.type = T::boolean;
        out.integer = tag & 1;
        return {};
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
    return Error(ErrorCode::malformed, "msgpack at offset " + hex(bytes_.origin(off_)) + ": " + what,
                 bytes_.origin(off_));
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

Expected<MsgpackShape> measure_msgpack(ByteView bytes, uint64_t max_values, uint64_t max_depth) {
  MsgpackShape shape;
  std::vector<uint64_t> open;  // items still to come in each open container, the innermost last
  uint64_t off = 0;
  auto fail = [&](uint64_t at, const std::string& what) {
    return Error(ErrorCode::malformed, "msgpack at offset " + hex(bytes.origin(at)) + ": " + what, bytes.origin(at));
  };
  auto big_endian = [&](unsigned width, uint64_t& v) {
    if (!bytes.contains(off, width)) return false;
    v = 0;
    for (unsigned i = 0; i < width; ++i) v = v << 8 | bytes.data()[off + i];
    off += width;
    return true;
  };
  do {
    const uint64_t at = off;
    if (++shape.values > max_values) return fail(at, "more than " + std::to_string(max_values) + " values");
    if (!bytes.contains(off, 1)) return fail(at, "truncated value");
    const uint8_t tag = bytes.data()[off++];
    uint64_t skip = 0;   // payload bytes of a scalar
    uint64_t items = 0;  // items of a container
    bool container = false;
    unsigned width = 0;  // bytes of a length field
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3) {
    } else if ((tag & 0xf0) == 0x80) {
      container = true, items = 2 * uint64_t(tag & 0x0f);
    } else if ((tag & 0xf0) == 0x90) {
      container = true, items = tag & 0x0f;
    } else if ((tag & 0xe0) == 0xa0) {
      skip = tag & 0x1f;
    } else {
      switch (tag) {
        case 0xc4:
        case 0xd9: width = 1; break;  // bin 8, str 8
        case 0xc5:
        case 0xda: width = 2; break;  // bin 16, str 16
        case 0xc6:
        case 0xdb: width = 4; break;            // bin 32, str 32
        case 0xc7: width = 1, skip = 1; break;  // ext 8 (+ its type byte)
        case 0xc8: width = 2, skip = 1; break;  // ext 16
        case 0xc9: width = 4, skip = 1; break;  // ext 32
        case 0xca: skip = 4; break;             // float 32
        case 0xcb: skip = 8; break;             // float 64
        case 0xcc:
        case 0xd0: skip = 1; break;  // (u)int 8
        case 0xcd:
        case 0xd1: skip = 2; break;  // (u)int 16
        case 0xce:
        case 0xd2: skip = 4; break;  // (u)int 32
        case 0xcf:
        case 0xd3: skip = 8; break;  // (u)int 64
        case 0xd4: skip = 2; break;  // fixext 1 (+ type)
        case 0xd5: skip = 3; break;
        case 0xd6: skip = 5; break;
        case 0xd7: skip = 9; break;
        case 0xd8: skip = 17; break;
        case 0xdc: container = true, width = 2; break;  // array 16
        case 0xdd: container = true, width = 4; break;  // array 32
        case 0xde:
        case 0xdf: container = true, width = tag == 0xde ? 2 : 4; break;  // map 16, 32
        default: return fail(at, "type byte " + hex(tag) + " is not MessagePack");
      }
      uint64_t n = 0;
      if (width && !big_endian(width, n)) return fail(at, "truncated length");
      if (container) items = tag >= 0xde ? 2 * n : n;
      else skip += n;
    }
    if (container) {
      if (open.size() + 1 > max_depth) return fail(at, "containers nested deeper than " + std::to_string(max_depth));
      if (items > bytes.size() - off)  // every item takes a byte at least
        return fail(at, "a container of " + std::to_string(items) + " items cannot fit in the " +
                            std::to_string(bytes.size() - off) + " bytes left");
      shape.depth = std::max<uint64_t>(shape.depth, open.size() + 1);
    } else if (!bytes.contains(off, skip)) {
      return fail(at, "a value of " + std::to_string(skip) + " bytes runs past the end");
    } else {
      off += skip;
    }
    if (!open.empty()) --open.back();
    if (container && items) open.push_back(items);
    while (!open.empty() && open.back() == 0) open.pop_back();
  } while (!open.empty());
  shape.size = off;
  return shape;
}

}  // namespace kir
