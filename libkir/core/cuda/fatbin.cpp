#include "kir/cuda/fatbin.hpp"

#include "kir/support/compression.hpp"

namespace kir {

namespace {

constexpr uint64_t kContainerHeaderSize = 16;
constexpr uint64_t kMinEntryHeaderSize = 64;
constexpr uint64_t kMaxEntryHeaderSize = 4096;  // strict mode only; seen 64..128

std::string entry_label(uint32_t index, ByteView at) {
  return "entry #" + std::to_string(index) + " at file offset " + hex(at.origin());
}

bool is_known_kind(uint16_t kind) { return kind == 1 || kind == 2 || kind == 4 || kind == 8; }

Status read_options(FatbinEntry& e) {
  if (e.options_offset == 0) return {};
  if (!e.header.contains(e.options_offset, 8))
    return Error(ErrorCode::out_of_bounds,
                 "options descriptor at entry offset " + hex(e.options_offset) +
                     " lies outside the entry header (size " + hex(e.header_size) + ")",
                 e.header.origin(e.options_offset));
  uint32_t text_off = e.header.read<uint32_t>(e.options_offset);
  uint32_t text_len = e.header.read<uint32_t>(e.options_offset + 4);
  if (text_len == 0) return {};
  if (!e.header.contains(text_off, text_len))
    return Error(ErrorCode::out_of_bounds,
                 "options text at entry offset " + hex(text_off) + " (length " + hex(text_len) +
                     ") lies outside the entry header (size " + hex(e.header_size) + ")",
                 e.header.origin(e.options_offset));
  e.options = std::string(e.header.sub(text_off, text_len).chars());
  return {};
}

/// Decode and check one entry header at `at` (which extends to the container end).
Status read_entry(ByteView at, FatbinEntry& e, const FatbinParseOptions& options) {
  if (!at.contains(0, kMinEntryHeaderSize))
    return Error(ErrorCode::truncated,
                 "entry header needs 0x40 bytes, only " + hex(at.size()) + " are left in the container",
                 at.origin(at.size()));
  e.kind = at.read<uint16_t>(0x00);
  e.format_version = at.read<uint16_t>(0x02);
  e.header_size = at.read<uint32_t>(0x04);
  e.payload_size = at.read<uint64_t>(0x08);
  e.compressed_size = at.read<uint32_t>(0x10);
  e.options_offset = at.read<uint32_t>(0x14);
  e.minor = at.read<uint16_t>(0x18);
  e.major = at.read<uint16_t>(0x1A);
  e.arch = at.read<uint32_t>(0x1C);
  uint32_t id_off = at.read<uint32_t>(0x20), id_len = at.read<uint32_t>(0x24);
  e.flags = at.read<uint64_t>(0x28);
  e.obfuscation_key = at.read<uint64_t>(0x30);
  e.uncompressed_size = at.read<uint64_t>(0x38);

  if (e.header_size < kMinEntryHeaderSize || !at.contains(0, e.header_size))
    return Error(ErrorCode::malformed,
                 "header size " + hex(e.header_size) + " (at offset " + hex(at.origin(4)) +
                     ") is not between 0x40 and the " + hex(at.size()) + " bytes left in the container",
                 at.origin(4));
  if (options.known_kinds_only) {
    if (!is_known_kind(e.kind))
      return Error(ErrorCode::malformed, "unknown entry kind " + std::to_string(e.kind), at.origin(0));
    if (e.format_version != 0x0101 || e.header_size > kMaxEntryHeaderSize || e.header_size % 8 != 0 || e.arch < 10 ||
        e.arch >= 10000)
      return Error(ErrorCode::malformed, "implausible entry header", at.origin(0));
  }
  if (!at.contains(e.header_size, e.payload_size))
    return Error(ErrorCode::out_of_bounds,
                 "payload size " + hex(e.payload_size) + " (at offset " + hex(at.origin(8)) +
                     ") runs past the end of the container (" + hex(at.size() - e.header_size) +
                     " bytes left after the header)",
                 at.origin(8));
  if (e.compressed_size > e.payload_size)
    return Error(ErrorCode::malformed,
                 "compressed size " + hex(e.compressed_size) + " (at offset " + hex(at.origin(0x10)) +
                     ") exceeds the payload size " + hex(e.payload_size),
                 at.origin(0x10));
  if (e.compressed_size != 0 && e.uncompressed_size == 0)
    return Error(ErrorCode::malformed,
                 "entry is compressed (" + hex(e.compressed_size) + " bytes) but its uncompressed size (at offset " +
                     hex(at.origin(0x38)) + ") is 0",
                 at.origin(0x38));
  e.header = at.sub(0, e.header_size);
  e.payload = at.sub(e.header_size, e.compressed_size ? e.compressed_size : e.payload_size);
  if (id_len != 0) {
    if (!at.contains(id_off, id_len) || uint64_t(id_off) + id_len > e.header_size + e.payload_size)
      return Error(ErrorCode::out_of_bounds,
                   "identifier at entry offset " + hex(id_off) + " (length " + hex(id_len) + ") lies outside the entry",
                   at.origin(id_off));
    e.identifier = std::string(at.sub(id_off, id_len).c_string(0));
  }
  return read_options(e);
}

}  // namespace

ImageKind fatbin_image_kind(uint16_t kind) {
  switch (kind) {
    case uint16_t(FatbinEntryKind::ptx): return ImageKind::ptx;
    case uint16_t(FatbinEntryKind::cubin): return ImageKind::cubin;
    case uint16_t(FatbinEntryKind::old_cubin): return ImageKind::old_cubin;
    case uint16_t(FatbinEntryKind::lto_ir): return ImageKind::lto_ir;
    default: return ImageKind::unknown;
  }
}

std::vector<std::string> fatbin_flag_names(uint64_t flags) {
  static const std::pair<uint64_t, const char*> known[] = {
      {fatbin_flag::k64Bit, "64bit"},     {fatbin_flag::kDebug, "debug"}, {fatbin_flag::kProducerCuda, "cuda"},
      {fatbin_flag::kHostLinux, "linux"}, {fatbin_flag::kHostMac, "mac"}, {fatbin_flag::kHostWindows, "windows"},
      {fatbin_flag::kLz4, "lz4"},         {fatbin_flag::kZstd, "zstd"},   {fatbin_flag::kObfuscated, "obfuscated"}};
  std::vector<std::string> names;
  for (const auto& [bit, name] : known)
    if (flags & bit) {
      names.emplace_back(name);
      flags &= ~bit;
    }
  for (uint64_t bit = 1; bit != 0; bit <<= 1)
    if (flags & bit) names.push_back(hex(bit));
  return names;
}

Compression FatbinEntry::compression() const {
  if (compressed_size == 0) return Compression::none;
  if (flags & fatbin_flag::kZstd) return Compression::zstd;
  if (flags & fatbin_flag::kLz4) return Compression::lz4;
  return Compression::unknown;
}

Expected<FatbinContainer> FatbinContainer::create(ByteView bytes, FatbinParseOptions options) {
  if (!bytes.contains(0, kContainerHeaderSize))
    return Error(ErrorCode::truncated,
                 "fatbin container header needs 0x10 bytes, only " + hex(bytes.size()) + " are left",
                 bytes.origin(bytes.size()));
  if (!has_magic(bytes))
    return Error(ErrorCode::bad_magic,
                 "expected fatbin container magic 0xba55ed50, found " + hex(bytes.read<uint32_t>(0)), bytes.origin(0));
  FatbinContainer c;
  c.version_ = bytes.read<uint16_t>(4);
  c.header_size_ = bytes.read<uint16_t>(6);
  c.entries_size_ = bytes.read<uint64_t>(8);
  if (c.version_ != 1)
    return Error(ErrorCode::unsupported_version,
                 "unsupported fatbin container version " + std::to_string(c.version_) + " at offset " +
                     hex(bytes.origin(4)) + ": expected 1",
                 bytes.origin(4));
  if (c.header_size_ < kContainerHeaderSize || !bytes.contains(0, c.header_size_))
    return Error(ErrorCode::malformed,
                 "fatbin container header size " + std::to_string(c.header_size_) + " at offset " +
                     hex(bytes.origin(6)) + " is invalid: expected 16",
                 bytes.origin(6));
  if (!bytes.contains(c.header_size_, c.entries_size_))
    return Error(ErrorCode::out_of_bounds,
                 "fatbin container size " + hex(c.entries_size_) + " (at offset " + hex(bytes.origin(8)) +
                     ") runs past the end of its section (" + hex(bytes.size() - c.header_size_) + " bytes left)",
                 bytes.origin(8));
  if (options.known_kinds_only && c.entries_size_ == 0)
    return Error(ErrorCode::malformed, "empty container", bytes.origin(8));
  c.bytes_ = bytes.sub(0, c.header_size_ + c.entries_size_);

  ByteView entries = c.bytes_.sub(c.header_size_, c.entries_size_);
  uint64_t off = 0;
  while (off < entries.size()) {
    FatbinEntry e;
    e.index = static_cast<uint32_t>(c.entries_.size());
    e.offset = c.header_size_ + off;
    ByteView at = entries.from(off);
    if (Status s = read_entry(at, e, options); !s) return s.error().within(entry_label(e.index, at));
    off += e.header_size + e.payload_size;
    c.entries_.push_back(e);
  }
  return c;
}

Expected<ByteView> decode_image(const FatbinEntry& e, Scratch& scratch, uint64_t max_size) {
  Compression c = e.compression();
  if (e.obfuscated())
    return Error(ErrorCode::unsupported,
                 "image is obfuscated LTO-IR (flag 0x10000): it cannot be decoded without "
                 "NVIDIA's key");
  if (c == Compression::none) return e.payload;
  if (e.uncompressed_size > max_size)
    return Error(ErrorCode::too_large, "claimed uncompressed size " + hex(e.uncompressed_size) + " exceeds the limit " +
                                           hex(max_size) + " (compressed size " + hex(e.compressed_size) + ")");
  if (c == Compression::unknown)
    return Error(ErrorCode::unsupported, "image is compressed but its flags " + hex(e.flags) +
                                             " name no known method (lz4 0x2000, zstd 0x8000)");
  Expected<ByteView> out = c == Compression::lz4 ? decompress_lz4_block(e.payload, e.uncompressed_size, scratch)
                                                 : decompress_zstd(e.payload, e.uncompressed_size, scratch);
  if (!out) out.error().within("payload at file offset " + hex(e.payload.origin()));
  return out;
}

Expected<std::vector<uint8_t>> read_image(const FatbinEntry& e, uint64_t max_size) {
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(e, scratch, max_size);
  if (!bytes) return bytes.error();
  return std::vector<uint8_t>(bytes->data(), bytes->data() + bytes->size());
}

}  // namespace kir
