// CUDA fat binary containers and their entries (device images).
//
// Container header (16 bytes):
//   0x00 u32 magic 0xBA55ED50
//   0x04 u16 version (1)
//   0x06 u16 header size (16)
//   0x08 u64 size of all entries that follow the header
//
// Entry header (header size >= 64); payload at entry + header size, next
// entry at entry + header size + payload size:
//   0x00 u16 kind: 1 PTX, 2 ELF cubin, 4 old cubin, 8 NVVM LTO-IR
//   0x02 u16 entry format version (0x0101)
//   0x04 u32 header size
//   0x08 u64 payload size (padded to 8)
//   0x10 u32 compressed size (0 = stored plain)
//   0x14 u32 offset of the options descriptor from the entry (0 = none);
//            the descriptor is {u32 offset of the text from the entry, u32 length}
//   0x18 u16 minor version, 0x1A u16 major version
//   0x1C u32 SM architecture (75, 80, 90, 100 ...)
//   0x20 u32 identifier offset from the entry, 0x24 u32 identifier length
//   0x28 u64 flags (see FatbinFlag)
//   0x30 u64 0, or a key on obfuscated LTO-IR
//   0x38 u64 uncompressed size (0 = stored plain)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kir/model.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;  // __fatBinC_Wrapper_t (CUDA)
constexpr uint32_t kHipWrapperMagic = 0x48495046;     // "HIPF"

enum class FatbinEntryKind : uint16_t { ptx = 1, cubin = 2, old_cubin = 4, lto_ir = 8 };

/// The image kind of a fatbin entry kind (FatbinEntryKind); unknown for other
/// values (the raw number stays in FatbinEntry::kind).
ImageKind fatbin_image_kind(uint16_t kind);

/// Bits of the entry flags field that have a known meaning.
namespace fatbin_flag {
constexpr uint64_t k64Bit = 0x1;
constexpr uint64_t kDebug = 0x2;
constexpr uint64_t kProducerCuda = 0x4;
constexpr uint64_t kHostLinux = 0x10;
constexpr uint64_t kHostMac = 0x20;
constexpr uint64_t kHostWindows = 0x40;
constexpr uint64_t kLz4 = 0x2000;
constexpr uint64_t kZstd = 0x8000;
constexpr uint64_t kObfuscated = 0x10000;
}  // namespace fatbin_flag

/// Names of the set flag bits: "64bit", "debug", "cuda", "linux", "mac",
/// "windows", "lz4", "zstd", "obfuscated"; other set bits as "0x100000".
std::vector<std::string> fatbin_flag_names(uint64_t flags);

/// An image's compression: kir/model.hpp's Codec (none, lz4, zstd, unknown; name(c)).
using Compression = Codec;

/// One device image: a view over its header and stored payload.
struct FatbinEntry {
  uint32_t index = 0;   // position in its container
  uint64_t offset = 0;  // from the container start
  uint16_t kind = 0;    // FatbinEntryKind value
  uint16_t format_version = 0;
  uint32_t header_size = 0;
  uint64_t payload_size = 0;  // padded
  uint32_t compressed_size = 0;
  uint32_t options_offset = 0;
  uint16_t major = 0, minor = 0;
  uint32_t arch = 0;
  uint64_t flags = 0;
  uint64_t obfuscation_key = 0;  // header word 0x30
  uint64_t uncompressed_size = 0;
  std::string identifier;  // copied: small, and read without touching the file again
  std::string options;
  ByteView header;   // header_size bytes
  ByteView payload;  // the stored bytes: compressed_size bytes when compressed

  Compression compression() const;
  bool obfuscated() const { return (flags & fatbin_flag::kObfuscated) != 0; }
  /// Size of the image once decompressed (payload size when stored plain).
  uint64_t image_size() const { return compression() == Compression::none ? payload.size() : uncompressed_size; }
};

struct FatbinParseOptions {
  /// Reject entry kinds kir does not know (used when scanning for containers,
  /// where random bytes must never pass as a container).
  bool known_kinds_only = false;
};

class FatbinContainer {
 public:
  /// True when `bytes` starts with the container magic.
  static bool has_magic(ByteView bytes) { return bytes.size() >= 4 && bytes.read<uint32_t>(0) == kFatbinMagic; }

  /// Parse the container starting at `bytes` (which may extend past it) and
  /// validate every entry header.
  static Expected<FatbinContainer> create(ByteView bytes, FatbinParseOptions options = {});

  uint16_t version() const { return version_; }
  uint16_t header_size() const { return header_size_; }
  uint64_t entries_size() const { return entries_size_; }
  /// Header plus entries.
  uint64_t total_size() const { return bytes_.size(); }
  ByteView bytes() const { return bytes_; }
  const std::vector<FatbinEntry>& entries() const { return entries_; }

 private:
  FatbinContainer() = default;
  ByteView bytes_;
  uint16_t version_ = 0;
  uint16_t header_size_ = 0;
  uint64_t entries_size_ = 0;
  std::vector<FatbinEntry> entries_;
};

constexpr uint64_t kMaxImageSize = uint64_t(4) << 30;

class Scratch;

/// The image bytes: the stored payload when plain, else decompressed into
/// `scratch` (valid until its next use). Refuses obfuscated entries, unknown
/// compression, and claimed sizes over `max_size`.
Expected<ByteView> decode_image(const FatbinEntry& entry, Scratch& scratch, uint64_t max_size = kMaxImageSize);

/// The image bytes as an owned copy (decode_image into a fresh buffer).
Expected<std::vector<uint8_t>> read_image(const FatbinEntry& entry, uint64_t max_size = kMaxImageSize);

}  // namespace kir
