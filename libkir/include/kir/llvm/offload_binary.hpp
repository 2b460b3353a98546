// LLVM offloading binaries (`.llvm.offloading`, section type 0x6fff4c0b;
// clang's new offload driver, OpenMP offload). Magic 10 FF 10 AD.
//
// Header:
//   0  u32 magic, 4 u32 version (1, 2, 3), 8 u64 total size, 16 u64 entries offset,
//   24 u64  v1: size of the entry table in bytes; v2/v3: number of entries
//   32 u64  v3 only: inflated size; when non-zero, the bytes from the entries
//           offset to the end are compressed (zstd or zlib, told by their magic)
//           and offsets refer to the inflated binary.
// Entry (40 bytes):
//   0 u16 image kind (0 none, 1 object, 2 bitcode, 3 cubin, 4 fatbinary, 5 PTX, 6 SPIR-V)
//   2 u16 offload kind (1 OpenMP, 2 CUDA, 3/4 HIP, 8 SYCL)
//   4 u32 flags, 8 u64 string map offset, 16 u64 string count,
//   24 u64 image offset, 32 u64 image size
// String map: v1 {u64 key offset, u64 value offset}, NUL-terminated strings;
//             v2+ {u64 key offset, u64 value offset, u64 value size}.
// Keys include "triple", "arch", "producer". Several binaries may follow each
// other in a section, each 8-aligned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kir/model.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

constexpr uint32_t kOffloadBinaryMagic = 0xAD10FF10;  // bytes 10 FF 10 AD

struct OffloadBinaryEntry {
  uint16_t image_kind = 0;
  uint16_t offload_kind = 0;
  uint32_t flags = 0;
  std::vector<std::pair<std::string, std::string>> strings;
  ByteView image;

  /// The value of a string-map key, "" when absent.
  std::string string(const std::string& key) const;
};

/// An entry's image kind: object, bitcode, cubin, fatbin, ptx, spirv; unknown
/// for IMG_None and values past IMG_SPIRV (the raw number stays in
/// OffloadBinaryEntry::image_kind). "object" is any ELF: see classify_elf.
ImageKind offload_image_kind(uint16_t kind);
/// "openmp", "cuda", "hip", "sycl", "none" or "unknown-N".
std::string offload_kind_name(uint16_t kind);

class OffloadBinary {
 public:
  static bool has_magic(ByteView bytes) { return bytes.size() >= 4 && bytes.read<uint32_t>(0) == kOffloadBinaryMagic; }

  /// Parse the binary at the start of `bytes` (which may extend past it).
  static Expected<OffloadBinary> create(ByteView bytes);

  uint32_t version() const { return version_; }
  uint64_t total_size() const { return total_size_; }
  bool compressed() const { return inflated_ != nullptr; }
  const std::vector<OffloadBinaryEntry>& entries() const { return entries_; }
  /// A v3 binary's inflated bytes (the entries' images point into them), else null.
  const std::shared_ptr<const std::vector<uint8_t>>& inflated() const { return inflated_; }

 private:
  OffloadBinary() = default;
  Status read_entries(ByteView bytes, uint64_t entries_offset, uint64_t count);

  uint32_t version_ = 0;
  uint64_t total_size_ = 0;
  std::vector<OffloadBinaryEntry> entries_;
  std::shared_ptr<const std::vector<uint8_t>> inflated_;
};

}  // namespace kir
