#include "kir/hash/hash.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for the builder's inline state
#include <xxhash.h>

#include <algorithm>

namespace kir {

static_assert(sizeof(XXH3_state_t) <= 640, "DynamicHash::state_ is too small for XXH3_state_t");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the hash encoding is written little-endian; big-endian hosts need byte swaps here"
#endif

namespace {

constexpr std::string_view kStaticDomain = "kir.static-hash";
constexpr std::string_view kDynamicDomain = "kir.dynamic-hash";

Hash128 from_xxh(XXH128_hash_t h) { return {h.high64, h.low64}; }

/// 16 bytes, high half first, big-endian: XXH3's canonical form.
void put_canonical(std::string& out, const Hash128& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH128_hash_t{h.low, h.high});
  out.append(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

void record(std::string& out, uint8_t tag, std::string_view payload) {
  uint32_t length = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>(tag));
  out.append(reinterpret_cast<const char*>(&length), 4);
  out.append(payload);
}

std::string header(std::string_view domain) {
  std::string payload(domain);
  uint32_t version = kHashFormatVersion;
  payload.append(reinterpret_cast<const char*>(&version), 4);
  return payload;
}

}  // namespace

std::string Hash128::hex() const {
  static const char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = digits[(high >> (4 * i)) & 15];
    out[31 - i] = digits[(low >> (4 * i)) & 15];
  }
  return out;
}

std::optional<Hash128> Hash128::from_hex(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  Hash128 h;
  for (size_t i = 0; i < 32; ++i) {
    char c = text[i];
    uint64_t v;
    if (c >= '0' && c <= '9') v = uint64_t(c - '0');
    else if (c >= 'a' && c <= 'f') v = uint64_t(c - 'a' + 10);
    else return std::nullopt;
    uint64_t& half = i < 16 ? h.high : h.low;
    half = half << 4 | v;
  }
  return h;
}

Hash128 xxh3_128(ByteView bytes) { return from_xxh(XXH3_128bits(bytes.data(), bytes.size())); }

Hash128 static_hash(std::string_view name, std::string_view code_kind,
                    const std::vector<ByteView>& modules) {
  // Modules enter by their own digests, sorted: the result does not depend on
  // registration or link order.
  std::vector<std::string> digests;
  for (ByteView m : modules) {
    std::string d;
    put_canonical(d, xxh3_128(m));
    digests.push_back(std::move(d));
  }
  std::sort(digests.begin(), digests.end());
  std::string encoding;
  record(encoding, hash_tag::kHeader, header(kStaticDomain));
  record(encoding, hash_tag::kName, name);
  record(encoding, hash_tag::kCodeKind, code_kind);
  for (const std::string& d : digests) record(encoding, hash_tag::kModule, d);
  return from_xxh(XXH3_128bits(encoding.data(), encoding.size()));
}

DynamicHash::DynamicHash(const Hash128& static_hash, std::string_view arch) {
  std::string head = header(kDynamicDomain);
  record(hash_tag::kHeader, head.size());
  put(head.data(), head.size());
  std::string digest;
  put_canonical(digest, static_hash);
  record(hash_tag::kStatic, 16);
  put(digest.data(), 16);
  record(hash_tag::kArch, arch.size());
  put(arch.data(), arch.size());
}

void DynamicHash::record(uint8_t tag, size_t length) {
  uint32_t n = static_cast<uint32_t>(length);
  put(&tag, 1);
  put_u32(n);
}

void DynamicHash::put(const void* data, size_t size) {
  if (used_ + size > kInline) flush();
  if (size > kInline) {  // larger than the whole buffer: stream it directly
    XXH3_128bits_update(reinterpret_cast<XXH3_state_t*>(state_), data, size);
    return;
  }
  std::memcpy(buffer_ + used_, data, size);
  used_ += size;
}

void DynamicHash::flush() {
  auto* state = reinterpret_cast<XXH3_state_t*>(state_);
  if (!streaming_) {
    XXH3_128bits_reset(state);
    streaming_ = true;
  }
  XXH3_128bits_update(state, buffer_, used_);
  used_ = 0;
}

DynamicHash& DynamicHash::arg(uint32_t position, ArgType type, const void* value, size_t size) {
  record(hash_tag::kArg, 5 + size);
  put_u32(position);
  uint8_t t = static_cast<uint8_t>(type);
  put(&t, 1);
  put(value, size);
  return *this;
}

DynamicHash& DynamicHash::dims(uint8_t tag, uint32_t x, uint32_t y, uint32_t z) {
  record(tag, 12);
  put_u32(x);
  put_u32(y);
  put_u32(z);
  return *this;
}

DynamicHash& DynamicHash::bounds(uint32_t max_threads, uint32_t min_blocks) {
  record(hash_tag::kBounds, 8);
  put_u32(max_threads);
  put_u32(min_blocks);
  return *this;
}

DynamicHash& DynamicHash::config(std::string_view key, std::string_view value) {
  record(hash_tag::kConfig, 4 + key.size() + value.size());
  put_u32(static_cast<uint32_t>(key.size()));
  put(key.data(), key.size());
  put(value.data(), value.size());
  return *this;
}

Hash128 DynamicHash::finish() {
  if (!streaming_) return from_xxh(XXH3_128bits(buffer_, used_));
  flush();
  return from_xxh(XXH3_128bits_digest(reinterpret_cast<XXH3_state_t*>(state_)));
}

uint64_t fnv1a_64(ByteView bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < bytes.size(); ++i) h = (h ^ bytes.data()[i]) * 0x100000001b3ull;
  return h;
}

uint64_t proteus_static_hash(std::string_view name, const std::vector<ByteView>& modules,
                             bool llvm20_or_newer) {
  auto hash = [&](ByteView b) { return llvm20_or_newer ? XXH3_64bits(b.data(), b.size()) : fnv1a_64(b); };
  auto combine = [&](uint64_t a, uint64_t b) {
    uint8_t both[16];
    std::memcpy(both, &a, 8);
    std::memcpy(both + 8, &b, 8);
    return hash(ByteView(both, 16));
  };
  uint64_t module = 0;
  for (size_t i = 0; i < modules.size(); ++i)
    module = i == 0 ? hash(modules[0]) : combine(module, hash(modules[i]));
  ByteView n(reinterpret_cast<const uint8_t*>(name.data()), name.size());
  return combine(hash(n), module);
}

}  // namespace kir
