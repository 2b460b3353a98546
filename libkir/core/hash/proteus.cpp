// Proteus's 64-bit hashes (kir/hash/proteus.hpp cites the Proteus sources).
#include "kir/hash/proteus.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <string>

namespace kir {

namespace {

/// llvm::StringRef::getAsInteger(0, uint64_t&) (radix sensed from the prefix:
/// "0x"/"0X" 16, "0b"/"0B" 2, "0o" or a leading "0" 8, else 10; the whole text
/// must be consumed; overflow fails). nullopt where LLVM reports failure.
std::optional<uint64_t> llvm_as_integer(std::string_view s) {
  unsigned radix = 10;
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) radix = 16, s.remove_prefix(2);
  else if (s.size() >= 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) radix = 2, s.remove_prefix(2);
  else if (s.size() >= 2 && s[0] == '0' && s[1] == 'o') radix = 8, s.remove_prefix(2);
  else if (s.size() >= 2 && s[0] == '0' && s[1] >= '0' && s[1] <= '9') radix = 8, s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : s) {
    unsigned digit;
    if (c >= '0' && c <= '9') digit = unsigned(c - '0');
    else if (c >= 'a' && c <= 'z') digit = unsigned(c - 'a' + 10);
    else if (c >= 'A' && c <= 'Z') digit = unsigned(c - 'A' + 10);
    else return std::nullopt;
    if (digit >= radix) return std::nullopt;
    if (value > (UINT64_MAX - digit) / radix) return std::nullopt;  // overflow
    value = value * radix + digit;
  }
  return value;
}

}  // namespace

uint64_t fnv1a_64(ByteView bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < bytes.size(); ++i) h = (h ^ bytes.data()[i]) * 0x100000001b3ull;
  return h;
}

uint64_t proteus_hash(ByteView bytes, bool llvm20_or_newer) {
  return llvm20_or_newer ? XXH3_64bits(bytes.data(), bytes.size()) : fnv1a_64(bytes);
}

uint64_t proteus_hash_combine(uint64_t a, uint64_t b, bool llvm20_or_newer) {
  uint8_t both[16];
  std::memcpy(both, &a, 8);  // little-endian hosts (kir/hash/hash.cpp checks)
  std::memcpy(both + 8, &b, 8);
  return proteus_hash(ByteView(both, 16), llvm20_or_newer);
}

std::optional<uint64_t> proteus_fold(const std::vector<uint64_t>& values, bool llvm20_or_newer) {
  std::optional<uint64_t> folded;
  for (uint64_t v : values) folded = folded ? proteus_hash_combine(*folded, v, llvm20_or_newer) : v;
  return folded;
}

std::optional<uint64_t> proteus_cuda_module_hash(const std::vector<ByteView>& modules, bool llvm20_or_newer) {
  std::vector<uint64_t> hashes;
  for (ByteView m : modules) hashes.push_back(proteus_hash(m, llvm20_or_newer));
  return proteus_fold(hashes, llvm20_or_newer);
}

Expected<std::optional<uint64_t>> proteus_hip_module_hash(const DeviceCode& code, bool llvm20_or_newer) {
  std::vector<uint64_t> suffixes;
  for (const EmbeddedModule& m : code.ir) {
    if (m.name.rfind(".jit.bitcode", 0) != 0) continue;
    std::string_view suffix = std::string_view(m.name).substr(m.name.rfind('.') + 1);
    std::optional<uint64_t> v = llvm_as_integer(suffix);
    if (!v)
      return Error(ErrorCode::malformed, "section " + m.name + ": its name's last field \"" + std::string(suffix) +
                                             "\" is not an integer (Proteus reads it as the section's hash)");
    suffixes.push_back(*v);
  }
  return proteus_fold(suffixes, llvm20_or_newer);
}

uint64_t proteus_static_hash_of_module(std::string_view name, uint64_t module_hash, bool llvm20_or_newer) {
  ByteView n(reinterpret_cast<const uint8_t*>(name.data()), name.size());
  return proteus_hash_combine(proteus_hash(n, llvm20_or_newer), module_hash, llvm20_or_newer);
}

uint64_t proteus_static_hash(std::string_view name, const std::vector<ByteView>& modules, bool llvm20_or_newer) {
  return proteus_static_hash_of_module(name, proteus_cuda_module_hash(modules, llvm20_or_newer).value_or(0),
                                       llvm20_or_newer);
}

}  // namespace kir
