// The canonical kernel hashes (docs/hashing.md, specification v2): 128-bit
// XXH3 over a typed, length-prefixed, domain-separated encoding.
//
//   static hash      identity of a kernel's code: its mangled name and the bytes
//                    of the code it comes from (IR modules, else the device image)
//   launch identity  identity of one launch, what a recorder deduplicates on: the
//                    static hash, arch, every argument's bytes, grid, block and
//                    dynamic shared memory
//   JIT key          what one compiled object is valid for: the static hash, the
//                    device arch, the runtime-constant arguments' values (arrays
//                    and objects dereferenced), lambda captures, the specialized
//                    launch dimensions and bounds, dynamic shared memory and the
//                    compile configuration (kir/hash/jit_key.hpp builds it)
//
// The encoding is a sequence of records `tag:u8 | length:u32 LE | payload`,
// starting with a header record naming the domain and its version, so no two
// different inputs encode alike, a hash of one domain never equals a hash of
// another, and the result is the same everywhere. DynamicHash builds the launch
// identity and the JIT key without allocating: records go into an inline
// buffer, hashed in one call at finish() (streamed only if it fills up).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kir/model.hpp"
#include "kir/support/bytes.hpp"

namespace kir {

/// The version in the static hash's HEADER (unchanged since format 1).
constexpr uint32_t kHashFormatVersion = 1;
/// The versions in the HEADER of the launch identity and of the JIT key.
constexpr uint32_t kLaunchIdentityVersion = 2;
constexpr uint32_t kJitKeyVersion = 2;

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
constexpr uint8_t kHeader = 0x00;      // domain name, then u32 format version
constexpr uint8_t kName = 0x01;        // mangled kernel name
constexpr uint8_t kCodeKind = 0x02;    // "ir", "cubin", "ptx", "code-object", ...
constexpr uint8_t kModule = 0x03;      // 16-byte XXH3-128 of one module / image (sorted)
constexpr uint8_t kStatic = 0x10;      // 16 bytes: the static hash
constexpr uint8_t kArch = 0x11;        // target architecture, "sm_90", "gfx90a:xnack+"
constexpr uint8_t kArg = 0x12;         // u32 position (1-based), u8 type, value bytes
constexpr uint8_t kGrid = 0x13;        // u32 x, y, z
constexpr uint8_t kBlock = 0x14;       // u32 x, y, z
constexpr uint8_t kBounds = 0x15;      // u32 max threads per block, u32 min blocks per SM
constexpr uint8_t kConfig = 0x16;      // u32 key length, key, value
constexpr uint8_t kShared = 0x17;      // u64 dynamic shared memory bytes
constexpr uint8_t kCapture = 0x18;     // u32 lambda length, lambda, u32 slot, u32 offset, u8 type, value
constexpr uint8_t kSpecialize = 0x19;  // u32 flags: kSpecialize* below
}  // namespace hash_tag

/// SPECIALIZE flags: which launch properties a compiled object was specialized
/// for (the GRID, BLOCK and BOUNDS records that follow).
constexpr uint32_t kSpecializeGrid = 1u;
constexpr uint32_t kSpecializeBlock = 2u;
constexpr uint32_t kSpecializeBounds = 4u;

/// The domain a DynamicHash builds (its HEADER record).
enum class HashDomain : uint8_t {
  jit_key,          // "kir.jit-key", version 2
  launch_identity,  // "kir.launch-identity", version 2
  dynamic_v1,       // "kir.dynamic-hash", version 1: format 1's dynamic hash, kept to check
                    // the `dynamic_hash` of records written before format 2
};

// Argument value types of ARG records: kir/model.hpp's ArgType.

/// XXH3-128 (seed 0) of raw bytes.
Hash128 xxh3_128(ByteView bytes);

/// The static hash of kernel `name` whose code is `modules` (the IR modules of
/// relocatable device code in any order, or one device image) of `code_kind`.
Hash128 static_hash(std::string_view name, std::string_view code_kind, const std::vector<ByteView>& modules);

/// The same from the modules' XXH3-128 digests (xxh3_128 of each), for callers
/// hashing many kernels of one image or module: each module is hashed once.
Hash128 static_hash_of_digests(std::string_view name, std::string_view code_kind, std::vector<Hash128> digests);

/// The same with the code kind as the model's enum (its name enters the hash).
inline Hash128 static_hash(std::string_view name, CodeKind code_kind, const std::vector<ByteView>& modules) {
  return static_hash(name, kir::name(code_kind), modules);
}

/// An AMDGPU target-id with its features in canonical order, sorted by name as clang
/// writes a canonical target-id (clang/lib/Basic/TargetID.cpp, getCanonicalTargetID: the
/// features in a std::map) and as HIP's gcnArchName reports one: "gfx90a:xnack-:sramecc+"
/// is "gfx90a:sramecc+:xnack-" (in `storage`). Any other arch ("sm_90", "gfx942", a
/// canonical target-id) is returned as it is. The JIT key's ARCH record holds this form.
std::string_view canonical_target_id(std::string_view arch, std::string& storage);

/// Builds a launch identity or a JIT key without allocating: the HEADER, STATIC
/// and ARCH records at construction, then the caller adds records in the order
/// docs/hashing.md gives for the domain.
class DynamicHash {
 public:
  DynamicHash(HashDomain domain, const Hash128& static_hash, std::string_view arch);
  /// A JIT key.
  DynamicHash(const Hash128& static_hash, std::string_view arch)
      : DynamicHash(HashDomain::jit_key, static_hash, arch) {}

  /// Continue from `prefix`, a builder holding only what every launch of one
  /// kernel on one device shares (its static hash and arch): copies just the
  /// bytes written so far. A JIT keeps one prefix per kernel and device.
  static DynamicHash extend(const DynamicHash& prefix) { return DynamicHash(prefix, 0); }
  /// The bytes written so far (what `from_prefix` continues from; empty once the
  /// builder streams, past its inline buffer): a prefix kept as a short string
  /// instead of a whole builder (the hook layer keeps one per kernel).
  std::string_view encoded() const {
    return streaming_ ? std::string_view() : std::string_view(reinterpret_cast<const char*>(buffer_), used_);
  }
  /// Continue from bytes `encoded()` returned (at most the inline buffer).
  static DynamicHash from_prefix(std::string_view encoded) { return DynamicHash(encoded); }

  DynamicHash& arg(uint32_t position, ArgType type, const void* value, size_t size) {
    unsigned char* p = size <= kInline - 10 ? reserve(10 + size) : nullptr;
    if (p) {  // the common case: one record, in place
      head(p, hash_tag::kArg, 5 + size);
      store32(p + 5, position);
      p[9] = static_cast<unsigned char>(type);
      copy_small(p + 10, value, size);
      return *this;
    }
    return arg_slow(position, type, value, size);
  }
  template <class T>
  DynamicHash& arg(uint32_t position, ArgType type, const T& value) {
    return arg(position, type, &value, sizeof value);
  }
  DynamicHash& grid(uint32_t x, uint32_t y, uint32_t z) { return dims(hash_tag::kGrid, x, y, z); }
  DynamicHash& block(uint32_t x, uint32_t y, uint32_t z) { return dims(hash_tag::kBlock, x, y, z); }
  DynamicHash& bounds(uint32_t max_threads, uint32_t min_blocks);
  DynamicHash& config(std::string_view key, std::string_view value) {
    const size_t n = 9 + key.size() + value.size();
    if (key.size() <= kInline && value.size() <= kInline) {
      if (unsigned char* p = reserve(n)) {  // the common case: one record, in place
        head(p, hash_tag::kConfig, n - 5);
        store32(p + 5, static_cast<uint32_t>(key.size()));
        std::memcpy(p + 9, key.data(), key.size());
        std::memcpy(p + 9 + key.size(), value.data(), value.size());
        return *this;
      }
    }
    return config_slow(key, value);
  }
  DynamicHash& config_slow(std::string_view key, std::string_view value);
  /// Records already encoded (kir_jit_config_records' CONFIG records), appended as they are.
  DynamicHash& records(const void* data, size_t size) {
    put(data, size);
    return *this;
  }
  DynamicHash& shared(uint64_t bytes) {
    if (unsigned char* p = reserve(13)) {
      head(p, hash_tag::kShared, 8);
      std::memcpy(p + 5, &bytes, 8);
      return *this;
    }
    record(hash_tag::kShared, 8);
    put(&bytes, 8);
    return *this;
  }
  DynamicHash& specialize(uint32_t flags) {
    if (unsigned char* p = reserve(9)) {
      head(p, hash_tag::kSpecialize, 4);
      store32(p + 5, flags);
      return *this;
    }
    record(hash_tag::kSpecialize, 4);
    put_u32(flags);
    return *this;
  }
  /// A lambda's captured runtime constant (Proteus: a jit_variable of the
  /// lambda type `lambda`, registered with __proteus_register_variable).
  DynamicHash& capture(std::string_view lambda, uint32_t slot, uint32_t offset, ArgType type, const void* value,
                       size_t size);

  /// An ARG record whose `size` value bytes the caller then gives through
  /// append(), in pieces (arrays read from device memory, streamed through a
  /// small buffer). Exactly `size` bytes must follow before the next record.
  DynamicHash& arg_header(uint32_t position, ArgType type, size_t size) {
    record(hash_tag::kArg, 5 + size);
    put_u32(position);
    uint8_t t = static_cast<uint8_t>(type);
    put(&t, 1);
    return *this;
  }
  DynamicHash& append(const void* data, size_t size) {
    put(data, size);
    return *this;
  }

  Hash128 finish();

 private:
  static constexpr size_t kInline = 512;

  explicit DynamicHash(std::string_view encoded) : used_(std::min(encoded.size(), kInline)) {
    std::memcpy(buffer_, encoded.data(), used_);
  }
  DynamicHash(const DynamicHash& prefix, int) : streaming_(prefix.streaming_), used_(prefix.used_) {
    if (streaming_) std::memcpy(state_, prefix.state_, sizeof state_);
    std::memcpy(buffer_, prefix.buffer_, used_);
  }

  DynamicHash& dims(uint8_t tag, uint32_t x, uint32_t y, uint32_t z) {
    if (unsigned char* p = reserve(17)) {
      head(p, tag, 12);
      store32(p + 5, x);
      store32(p + 9, y);
      store32(p + 13, z);
      return *this;
    }
    record(tag, 12);
    put_u32(x);
    put_u32(y);
    put_u32(z);
    return *this;
  }
  DynamicHash& arg_slow(uint32_t position, ArgType type, const void* value, size_t size);

  /// `n` bytes of the inline buffer to write a record into, or nullptr when full.
  unsigned char* reserve(size_t n) {
    if (n > kInline - used_) return nullptr;  // never wraps: used_ <= kInline
    unsigned char* p = buffer_ + used_;
    used_ += n;
    return p;
  }
  static void store32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }  // LE hosts
  static void head(unsigned char* p, uint8_t tag, size_t length) {
    p[0] = tag;
    store32(p + 1, static_cast<uint32_t>(length));
  }
  /// Fixed-size copies for the usual scalar sizes (they compile to moves).
  static void copy_small(unsigned char* p, const void* v, size_t size) {
    switch (size) {
      case 1: std::memcpy(p, v, 1); break;
      case 2: std::memcpy(p, v, 2); break;
      case 4: std::memcpy(p, v, 4); break;
      case 8: std::memcpy(p, v, 8); break;
      default: std::memcpy(p, v, size);
    }
  }
  void record(uint8_t tag, size_t length) {  // tag, then the payload length
    unsigned char h[5];
    head(h, tag, length);
    put(h, 5);
  }
  void put(const void* data, size_t size) {
    if (used_ + size <= kInline) {
      std::memcpy(buffer_ + used_, data, size);
      used_ += size;
    } else {
      spill(data, size);
    }
  }
  void put_u32(uint32_t v) { put(&v, 4); }
  void spill(const void* data, size_t size);  // the rare path: stream through XXH3's state
  void flush();

  alignas(64) unsigned char state_[640];  // XXH3_state_t, only used past kInline bytes
  bool streaming_ = false;
  size_t used_ = 0;
  unsigned char buffer_[kInline];
};

/// One CONFIG record, appended to `out`: the format's one definition out of line
/// (kir_jit_config_records, a client's fixed options encoded once, and
/// DynamicHash::config's slow path; its inline path writes the same bytes).
void encode_config_record(std::string& out, std::string_view key, std::string_view value);

/// The launch identity (docs/hashing.md): every argument's bytes (ARG records
/// of type bytes, one per parameter whose `args[i]` is not null, `sizes[i]`
/// bytes), grid, block and dynamic shared memory. The hook layer computes it
/// for every launch it reports (kir_hook_launch.launch_identity).
Hash128 launch_identity(const Hash128& static_hash, std::string_view arch, void* const* args, const uint32_t* sizes,
                        uint32_t count, const uint32_t grid[3], const uint32_t block[3], uint64_t shared_bytes);
/// The same from its prefix: HEADER, STATIC and ARCH as
/// `DynamicHash(HashDomain::launch_identity, static_hash, arch).encoded()` holds
/// them (the hook layer keeps one per kernel instead of encoding them each launch).
Hash128 launch_identity_from(std::string_view prefix, void* const* args, const uint32_t* sizes, uint32_t count,
                             const uint32_t grid[3], const uint32_t block[3], uint64_t shared_bytes);

// The JIT key from a launch and its runtime-constant arguments: kir/hash/jit_key.hpp.
// Proteus's 64-bit hashes: kir/hash/proteus.hpp.

}  // namespace kir
