// Clang offload bundles (clang-offload-bundler; HIP's `.hip_fatbin`).
//
// Uncompressed bundle:
//   0   char[24] "__CLANG_OFFLOAD_BUNDLE__" (no NUL)
//   24  u64      number of entries N
//   then N x { u64 offset (from the bundle start), u64 size, u64 id length n, char id[n] }
// Entry ids read "<offload kind>-<triple, 4 parts>-<target id>", for example
// "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+" or "host-x86_64-unknown-linux-gnu-".
//
// Compressed bundle ("CCOB", clang --offload-compress), decompressing to an
// uncompressed bundle:
//   off  v1 (20 B)            v2 (24 B)                 v3 (32 B)
//   0    "CCOB"               "CCOB"                    "CCOB"
//   4    u16 version          u16 version               u16 version
//   6    u16 method (0 zlib, 1 zstd)
//   8    u32 uncompressed     u32 total size            u64 total size (with header)
//   12   u64 hash             u32 uncompressed size     -
//   16   -                    u64 hash                  u64 uncompressed size
//   24   -                    -                         u64 hash
// hash = the first 8 bytes (little-endian) of the MD5 of the uncompressed bundle.
//
// Object-file bundles (`clang-offload-bundler --type=o`) have no header: each
// entry is an ELF section named "__CLANG_OFFLOAD_BUNDLE__<id>".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kir/support/bytes.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/error.hpp"

namespace kir {

constexpr std::string_view kOffloadBundleMagic = "__CLANG_OFFLOAD_BUNDLE__";
constexpr std::string_view kCompressedBundleMagic = "CCOB";

/// An entry id split into its parts.
struct BundleId {
  std::string kind;    // "hip", "hipv4", "openmp", "host", "cuda" ...
  std::string triple;  // "amdgcn-amd-amdhsa-" (four parts, the last may be empty)
  std::string target;  // "gfx90a:xnack+", "" for the host

  /// The host entry ("host-<triple>-"): the offload kind the bundler gives it.
  bool host() const { return kind == "host"; }
};
BundleId parse_bundle_id(std::string_view id);

struct BundleEntry {
  std::string id;
  uint64_t offset = 0;  // from the bundle start
  uint64_t size = 0;
  ByteView data;
};

class OffloadBundle {
 public:
  static bool has_magic(ByteView bytes) { return bytes.starts_with(kOffloadBundleMagic); }

  /// Parse the bundle at the start of `bytes` (which may extend past it).
  static Expected<OffloadBundle> create(ByteView bytes);

  const std::vector<BundleEntry>& entries() const { return entries_; }
  /// From the magic to the end of the last entry or of the entry table.
  uint64_t total_size() const { return total_size_; }

 private:
  OffloadBundle() = default;
  std::vector<BundleEntry> entries_;
  uint64_t total_size_ = 0;
};

enum class BundleCodec { zlib = 0, zstd = 1 };

struct CompressedBundle {
  static bool has_magic(ByteView bytes) { return bytes.starts_with(kCompressedBundleMagic); }

  /// Parse the header at the start of `bytes`; v1 (no total size) runs to the end of `bytes`.
  static Expected<CompressedBundle> create(ByteView bytes);

  uint16_t version = 0;
  BundleCodec codec = BundleCodec::zlib;
  uint32_t header_size = 0;
  uint64_t total_size = 0;  // header + payload
  uint64_t uncompressed_size = 0;
  uint64_t hash = 0;
  ByteView payload;

  /// The uncompressed bundle, its MD5 checked against `hash`.
  Expected<std::vector<uint8_t>> decompress(uint64_t max_size = uint64_t(4) << 30) const;
};

}  // namespace kir
