// A small MessagePack reader and writer. The reader is enough of the format for
// the AMDGPU code-object metadata note (maps, arrays, strings, integers,
// booleans, floats, nil), bounds-checked and depth-limited, its values views
// into the input. The writer emits the same subset plus binary blobs, always in
// the shortest encoding (the record format's metadata). measure_msgpack bounds
// what decoding a value costs before a decoder (kir.record's) builds it.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

struct MsgpackValue {
  enum class Type { nil, boolean, integer, floating, string, binary, array, map };
  Type type = Type::nil;
  int64_t integer = 0;  // also booleans (0/1); unsigned values above INT64_MAX saturate
  double floating = 0;
  std::string_view string;          // strings and binary blobs
  std::vector<MsgpackValue> items;  // arrays; maps as key, value, key, value ...

  /// A map's value for a string key, or nullptr.
  const MsgpackValue* get(std::string_view key) const;
};

/// Decode the one value at the start of `bytes`.
Expected<MsgpackValue> parse_msgpack(ByteView bytes);

/// The shape of one MessagePack value: how many values it is made of (itself and
/// every key, element and value nested in it), how deeply containers nest in it
/// (a scalar: 0), and the bytes it takes.
struct MsgpackShape {
  uint64_t values = 0;
  uint64_t depth = 0;
  uint64_t size = 0;
};

/// Walk the one value at the start of `bytes`, the whole format (extension types
/// included), without building it and without recursion: the bound on what decoding
/// it may cost, checked before a decoder allocates anything. Refuses (an Error with
/// the offset) more than `max_values` values, containers nested deeper than
/// `max_depth`, a container announcing more items than the bytes left can hold, and
/// anything truncated or not MessagePack.
Expected<MsgpackShape> measure_msgpack(ByteView bytes, uint64_t max_values, uint64_t max_depth);

/// Appends MessagePack values to a buffer. Containers are written as a header
/// (`map(n)`: n key/value pairs follow; `array(n)`: n values follow).
class MsgpackWriter {
 public:
  MsgpackWriter& nil();
  MsgpackWriter& boolean(bool value);
  MsgpackWriter& uint(uint64_t value);
  MsgpackWriter& sint(int64_t value);
  MsgpackWriter& f64(double value);
  MsgpackWriter& str(std::string_view text);
  MsgpackWriter& bin(const void* data, size_t size);
  MsgpackWriter& array(uint32_t count);
  MsgpackWriter& map(uint32_t count);
  /// A map key: the same as str(), named for readability at call sites.
  MsgpackWriter& key(std::string_view name) { return str(name); }

  /// A map header put in front of the bytes written since `position` (a map whose
  /// entries were counted as they were written), in its shortest encoding.
  MsgpackWriter& insert_map(size_t position, uint32_t count);

  size_t size() const { return out_.size(); }
  const std::vector<uint8_t>& bytes() const { return out_; }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(uint8_t byte) { out_.push_back(byte); }
  void put_be(uint64_t value, int bytes);
  void header(uint8_t fix_base, uint32_t fix_limit, uint8_t tag16, uint8_t tag32, uint32_t count);
  std::vector<uint8_t> out_;
};

}  // namespace kir
