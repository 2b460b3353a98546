#include "kir/hash/hash.hpp"

#include "kir/hash/omp_region.hpp"

// The system xxhash library, inlined from its header: the dynamic hash is on
// every launch's path, where a call into a shared library costs as much as the
// hashing. Long inputs go to an AVX2 build when the CPU has AVX2.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>

#include "xxh3_dispatch.hpp"

namespace kir {

static_assert(sizeof(XXH3_state_t) <= 640, "DynamicHash::state_ is too small for XXH3_state_t");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the hash encoding is written little-endian; big-endian hosts need byte swaps here"
#endif

namespace {

constexpr std::string_view kStaticDomain = "kir.static-hash";
constexpr std::string_view kDynamicDomain = "kir.dynamic-hash";  // format 1, records written before 2
constexpr std::string_view kJitKeyDomain = "kir.jit-key";
constexpr std::string_view kLaunchIdentityDomain = "kir.launch-identity";
constexpr std::string_view kOmpRegionDomain = "kir.omp-region";

Hash128 from_xxh(XXH128_hash_t h) { return {h.high64, h.low64}; }

/// 16 bytes, high half first, big-endian: XXH3's canonical form.
void canonical(const Hash128& h, unsigned char out[16]) {
  uint64_t high = __builtin_bswap64(h.high), low = __builtin_bswap64(h.low);  // LE host
  std::memcpy(out, &high, 8);
  std::memcpy(out + 8, &low, 8);
}

void put_canonical(std::string& out, const Hash128& h) {
  unsigned char c[16];
  canonical(h, c);
  out.append(reinterpret_cast<const char*>(c), 16);
}

/// A launch identity's or JIT key's first record, fixed per domain:
/// HEADER(domain, version).
struct Header {
  unsigned char bytes[32];
  size_t size = 0;
  Header(std::string_view domain, uint32_t version) {
    uint32_t length = uint32_t(domain.size() + 4);
    bytes[0] = hash_tag::kHeader;
    std::memcpy(bytes + 1, &length, 4);
    std::memcpy(bytes + 5, domain.data(), domain.size());
    std::memcpy(bytes + 5 + domain.size(), &version, 4);
    size = 9 + domain.size();
  }
};
const Header kHeaders[] = {
    {kJitKeyDomain, kJitKeyVersion},                  // HashDomain::jit_key
    {kLaunchIdentityDomain, kLaunchIdentityVersion},  // HashDomain::launch_identity
    {kDynamicDomain, 1},                              // HashDomain::dynamic_v1
};

void record(std::string& out, uint8_t tag, std::string_view payload) {
  uint32_t length = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>(tag));
  out.append(reinterpret_cast<const char*>(&length), 4);
  out.append(payload);
}

std::string header(std::string_view domain, uint32_t version = kHashFormatVersion) {
  std::string payload(domain);
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

Hash128 xxh3_128(ByteView bytes) {
#if defined(__x86_64__) && defined(KIR_HAVE_AVX2_XXH3)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && bytes.size() >= 4096) return from_xxh(detail::xxh3_128_avx2(bytes.data(), bytes.size()));
#endif
  return from_xxh(XXH3_128bits(bytes.data(), bytes.size()));
}

Hash128 static_hash(std::string_view name, std::string_view code_kind, const std::vector<ByteView>& modules) {
  std::vector<Hash128> digests;
  for (ByteView m : modules) digests.push_back(xxh3_128(m));
  return static_hash_of_digests(name, code_kind, std::move(digests));
}

Hash128 static_hash_of_digests(std::string_view name, std::string_view code_kind, std::vector<Hash128> modules) {
  // Modules enter by their own digests, sorted (bytewise, canonical form): the
  // result does not depend on registration or link order.
  std::vector<std::string> digests;
  for (const Hash128& m : modules) {
    std::string d;
    put_canonical(d, m);
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

Hash128 omp_region_identity(std::string_view normalized_name, std::string_view code_kind, const Hash128& code_digest) {
  std::string digest, encoding;
  put_canonical(digest, code_digest);
  record(encoding, hash_tag::kHeader, header(kOmpRegionDomain, kOmpRegionVersion));
  record(encoding, hash_tag::kName, normalized_name);
  record(encoding, hash_tag::kCodeKind, code_kind);
  record(encoding, hash_tag::kModule, digest);
  return from_xxh(XXH3_128bits(encoding.data(), encoding.size()));
}

std::string_view canonical_target_id(std::string_view arch, std::string& storage) {
  size_t colon = arch.find(':');
  if (arch.substr(0, 3) != "gfx" || colon == std::string_view::npos) return arch;
  std::array<std::string_view, 8> features;
  size_t count = 0;
  for (std::string_view rest = arch.substr(colon + 1);; ++count) {
    if (count == features.size()) return arch;  // not a target-id (gfx processors have at most two features)
    size_t next = rest.find(':');
    features[count] = rest.substr(0, next);
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  ++count;
  auto by_name = [](std::string_view a, std::string_view b) {  // "xnack-" is named "xnack"
    return a.substr(0, a.empty() ? 0 : a.size() - 1) < b.substr(0, b.empty() ? 0 : b.size() - 1);
  };
  if (std::is_sorted(features.begin(), features.begin() + count, by_name)) return arch;
  // At most eight: an insertion sort, stable. Not std::stable_sort: libstdc++'s reaches
  // the deprecated std::get_temporary_buffer, an error under clang's -Werror (the
  // libFuzzer build; binary.cpp avoids it the same way).
  for (size_t i = 1; i < count; ++i)
    for (size_t j = i; j > 0 && by_name(features[j], features[j - 1]); --j) std::swap(features[j], features[j - 1]);
  storage.assign(arch.substr(0, colon));
  for (size_t i = 0; i < count; ++i) storage.append(1, ':').append(features[i]);
  return storage;
}

DynamicHash::DynamicHash(HashDomain domain, const Hash128& static_hash, std::string_view arch) {
  std::string canonical_arch;
  if (domain == HashDomain::jit_key) arch = canonical_target_id(arch, canonical_arch);
  const Header& h = kHeaders[static_cast<size_t>(domain)];
  std::memcpy(buffer_, h.bytes, h.size);
  used_ = h.size;
  if (unsigned char* p = arch.size() <= 64 ? reserve(26 + arch.size()) : nullptr) {  // the usual case, in place
    head(p, hash_tag::kStatic, 16);
    canonical(static_hash, p + 5);
    head(p + 21, hash_tag::kArch, arch.size());
    std::memcpy(p + 26, arch.data(), arch.size());
    return;
  }
  record(hash_tag::kStatic, 16);
  canonical(static_hash, buffer_ + used_);
  used_ += 16;
  record(hash_tag::kArch, arch.size());
  put(arch.data(), arch.size());
}

void DynamicHash::spill(const void* data, size_t size) {
  flush();
  if (size > kInline) {  // larger than the whole buffer: stream it directly
    XXH3_128bits_update(reinterpret_cast<XXH3_state_t*>(state_), data, size);
    return;
  }
  std::memcpy(buffer_, data, size);
  used_ = size;
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

DynamicHash& DynamicHash::arg_slow(uint32_t position, ArgType type, const void* value, size_t size) {
  record(hash_tag::kArg, 5 + size);
  put_u32(position);
  uint8_t t = static_cast<uint8_t>(type);
  put(&t, 1);
  put(value, size);
  return *this;
}

DynamicHash& DynamicHash::bounds(uint32_t max_threads, uint32_t min_blocks) {
  record(hash_tag::kBounds, 8);
  put_u32(max_threads);
  put_u32(min_blocks);
  return *this;
}

void encode_config_record(std::string& out, std::string_view key, std::string_view value) {
  uint32_t length = static_cast<uint32_t>(4 + key.size() + value.size()), key_size = static_cast<uint32_t>(key.size());
  out.push_back(static_cast<char>(hash_tag::kConfig));
  out.append(reinterpret_cast<const char*>(&length), 4);
  out.append(reinterpret_cast<const char*>(&key_size), 4);
  out.append(key);
  out.append(value);
}

DynamicHash& DynamicHash::config_slow(std::string_view key, std::string_view value) {
  std::string record;  // a large value, or a full buffer: rare, one allocation is no matter
  encode_config_record(record, key, value);
  put(record.data(), record.size());
  return *this;
}

DynamicHash& DynamicHash::capture(std::string_view lambda, uint32_t slot, uint32_t offset, ArgType type,
                                  const void* value, size_t size) {
  record(hash_tag::kCapture, 4 + lambda.size() + 9 + size);
  put_u32(static_cast<uint32_t>(lambda.size()));
  put(lambda.data(), lambda.size());
  put_u32(slot);
  put_u32(offset);
  uint8_t t = static_cast<uint8_t>(type);
  put(&t, 1);
  put(value, size);
  return *this;
}

Hash128 launch_identity(const Hash128& static_hash, std::string_view arch, void* const* args, const uint32_t* sizes,
                        uint32_t count, const uint32_t grid[3], const uint32_t block[3], uint64_t shared_bytes) {
  DynamicHash h(HashDomain::launch_identity, static_hash, arch);
  for (uint32_t i = 0; args && sizes && i < count; ++i)
    if (args[i]) h.arg(i + 1, ArgType::bytes, args[i], sizes[i]);
  return h.grid(grid[0], grid[1], grid[2]).block(block[0], block[1], block[2]).shared(shared_bytes).finish();
}

Hash128 launch_identity_from(std::string_view prefix, void* const* args, const uint32_t* sizes, uint32_t count,
                             const uint32_t grid[3], const uint32_t block[3], uint64_t shared_bytes) {
  DynamicHash h = DynamicHash::from_prefix(prefix);
  for (uint32_t i = 0; args && sizes && i < count; ++i)
    if (args[i]) h.arg(i + 1, ArgType::bytes, args[i], sizes[i]);
  return h.grid(grid[0], grid[1], grid[2]).block(block[0], block[1], block[2]).shared(shared_bytes).finish();
}

Hash128 DynamicHash::finish() {
  if (!streaming_) return from_xxh(XXH3_128bits(buffer_, used_));
  flush();
  return from_xxh(XXH3_128bits_digest(reinterpret_cast<XXH3_state_t*>(state_)));
}

}  // namespace kir
