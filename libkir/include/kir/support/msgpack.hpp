// A small MessagePack reader: enough of the format for the AMDGPU code-object
// metadata note (maps, arrays, strings, integers, booleans, floats, nil).
// Bounds-checked and depth-limited; values are views into the input.
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
  std::string_view string;  // strings and binary blobs
  std::vector<MsgpackValue> items;  // arrays; maps as key, value, key, value ...

  /// A map's value for a string key, or nullptr.
  const MsgpackValue* get(std::string_view key) const;
};

/// Decode the one value at the start of `bytes`.
Expected<MsgpackValue> parse_msgpack(ByteView bytes);

}  // namespace kir
