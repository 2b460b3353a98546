// The canonical kernel hashes (docs/hashing.md): 128-bit XXH3 over a typed,
// length-prefixed, domain-separated encoding.
//
//   static hash  = identity of a kernel's code: its mangled name and the bytes
//                  of the code it comes from (IR modules, else the device image)
//   dynamic hash = identity of a specialized variant / launch: the static hash,
//                  the target architecture and every input that changes the
//                  generated code (runtime-constant arguments, launch dims and
//                  bounds when specialized, code-generation configuration)
//
// The encoding is a sequence of records `tag:u8 | length:u32 LE | payload`,
// starting with a header record naming the domain and the format version, so
// no two different inputs encode alike and the result is the same everywhere.
// DynamicHash builds the dynamic key without allocating: records go into an
// inline buffer, hashed in one call at finish() (streamed only if it fills up).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kir/support/bytes.hpp"

namespace kir {

constexpr uint32_t kHashFormatVersion = 1;

/// A 128-bit hash. Its text form is 32 lowercase hex digits, high half first
/// (XXH3's canonical big-endian form).
struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;

  std::string hex() const;
  /// Strictly 32 lowercase hex digits; nullopt otherwise.
  static std::optional<Hash128> from_hex(std::string_view text);
  bool operator==(const Hash128& o) const { return high == o.high && low == o.low; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
};

/// Record tags of the encoding (docs/hashing.md lists the payloads).
namespace hash_tag {
constexpr uint8_t kHeader = 0x00;  // domain name, then u32 format version
constexpr uint8_t kName = 0x01;    // mangled kernel name
constexpr uint8_t kCodeKind = 0x02;  // "ir", "cubin", "ptx", "code-object", ...
constexpr uint8_t kModule = 0x03;  // 16-byte XXH3-128 of one module / image (sorted)
constexpr uint8_t kStatic = 0x10;  // 16 bytes: the static hash
constexpr uint8_t kArch = 0x11;    // target architecture, "sm_90", "gfx90a:xnack+"
constexpr uint8_t kArg = 0x12;     // u32 position (1-based), u8 type, value bytes
constexpr uint8_t kGrid = 0x13;    // u32 x, y, z
constexpr uint8_t kBlock = 0x14;   // u32 x, y, z
constexpr uint8_t kBounds = 0x15;  // u32 max threads per block, u32 min blocks per SM
constexpr uint8_t kConfig = 0x16;  // u32 key length, key, value
}  // namespace hash_tag

/// Argument value types of ARG records.
enum class ArgType : uint8_t {
  i8 = 1, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, ptr, bytes, boolean
};

/// XXH3-128 (seed 0) of raw bytes.
Hash128 xxh3_128(ByteView bytes);

/// The static hash of kernel `name` whose code is `modules` (the IR modules of
/// relocatable device code in any order, or one device image) of `code_kind`.
Hash128 static_hash(std::string_view name, std::string_view code_kind,
                    const std::vector<ByteView>& modules);

/// Builds a dynamic hash without allocating. Add records in a fixed order
/// (docs/hashing.md): arguments by increasing position, then grid, block,
/// bounds, then configuration in the order the client defines.
class DynamicHash {
 public:
  DynamicHash(const Hash128& static_hash, std::string_view arch);

  DynamicHash& arg(uint32_t position, ArgType type, const void* value, size_t size);
  template <class T>
  DynamicHash& arg(uint32_t position, ArgType type, const T& value) {
    return arg(position, type, &value, sizeof value);
  }
  DynamicHash& grid(uint32_t x, uint32_t y, uint32_t z) { return dims(hash_tag::kGrid, x, y, z); }
  DynamicHash& block(uint32_t x, uint32_t y, uint32_t z) { return dims(hash_tag::kBlock, x, y, z); }
  DynamicHash& bounds(uint32_t max_threads, uint32_t min_blocks);
  DynamicHash& config(std::string_view key, std::string_view value);

  Hash128 finish();

 private:
  static constexpr size_t kInline = 512;

  DynamicHash& dims(uint8_t tag, uint32_t x, uint32_t y, uint32_t z);
  void record(uint8_t tag, size_t length);  // writes tag and length
  void put(const void* data, size_t size);
  void put_u32(uint32_t v) { put(&v, 4); }  // little-endian hosts (checked in hash.cpp)
  void flush();

  alignas(64) unsigned char state_[640];  // XXH3_state_t, only used past kInline bytes
  bool streaming_ = false;
  size_t used_ = 0;
  unsigned char buffer_[kInline];
};

/// Proteus's current 64-bit static hash (migration): combine(hash(name), module
/// hash), module hash = hash(module 0), then combine(previous, hash(next)) in
/// registration order. LLVM >= 20 builds: hash = XXH3-64, combine = XXH3-64 of
/// the 16 little-endian bytes of both; older builds: 64-bit FNV-1a for both.
uint64_t proteus_static_hash(std::string_view name, const std::vector<ByteView>& modules,
                             bool llvm20_or_newer);

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a_64(ByteView bytes);

}  // namespace kir
