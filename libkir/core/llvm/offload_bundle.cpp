#include "kir/llvm/offload_bundle.hpp"

#include <algorithm>

#include "kir/support/md5.hpp"

namespace kir {

namespace {

constexpr uint64_t kBundleHeaderSize = 32;  // magic + entry count
constexpr uint64_t kMaxBundleEntries = 1 << 16;
constexpr uint64_t kMaxIdLength = 4096;

/// One entry-table record at `off`; advances `off`.
Expected<BundleEntry> read_entry(ByteView bytes, uint64_t& off, uint64_t index) {
  std::string where = "bundle entry #" + std::to_string(index) + " at offset " + hex(bytes.origin(off));
  if (!bytes.contains(off, 24))
    return Error(ErrorCode::truncated, where + ": the entry table runs past the end of the data", bytes.origin(off));
  BundleEntry e;
  e.offset = bytes.read<uint64_t>(off);
  e.size = bytes.read<uint64_t>(off + 8);
  uint64_t id_length = bytes.read<uint64_t>(off + 16);
  off += 24;
  if (id_length > kMaxIdLength || !bytes.contains(off, id_length))
    return Error(ErrorCode::out_of_bounds, where + ": id length " + hex(id_length) + " runs past the end of the data",
                 bytes.origin(off));
  e.id = std::string(bytes.sub(off, id_length).chars());
  off += id_length;
  if (!bytes.contains(e.offset, e.size))
    return Error(ErrorCode::out_of_bounds, where + " ('" + e.id + "'): data at bundle offset " + hex(e.offset) +
                                               " (size " + hex(e.size) + ") runs past the end of the data (" +
                                               hex(bytes.size()) + " bytes)");
  e.data = bytes.sub(e.offset, e.size);
  return e;
}

}  // namespace

BundleId parse_bundle_id(std::string_view id) {
  BundleId out;
  size_t dash = id.find('-');
  out.kind = std::string(id.substr(0, dash));
  if (dash == std::string_view::npos) return out;
  std::string_view rest = id.substr(dash + 1);
  size_t pos = 0;
  for (int part = 0; part < 4 && pos <= rest.size(); ++part) {
    size_t next = rest.find('-', pos);
    if (next == std::string_view::npos) {
      pos = rest.size() + 1;
      break;
    }
    pos = next + 1;
  }
  size_t triple_end = pos > rest.size() ? rest.size() : pos - 1;
  out.triple = std::string(rest.substr(0, triple_end));
  if (pos <= rest.size()) out.target = std::string(rest.substr(pos));
  return out;
}

Expected<OffloadBundle> OffloadBundle::create(ByteView bytes) {
  if (!has_magic(bytes))
    return Error(ErrorCode::bad_magic, "expected the offload bundle magic __CLANG_OFFLOAD_BUNDLE__", bytes.origin(0));
  if (!bytes.contains(0, kBundleHeaderSize))
    return Error(ErrorCode::truncated,
                 "offload bundle header needs 0x20 bytes, only " + hex(bytes.size()) + " are left",
                 bytes.origin(bytes.size()));
  uint64_t count = bytes.read<uint64_t>(24);
  if (count > kMaxBundleEntries)
    return Error(ErrorCode::too_large,
                 "offload bundle claims " + std::to_string(count) + " entries (at offset " + hex(bytes.origin(24)) +
                     "): more than " + std::to_string(kMaxBundleEntries),
                 bytes.origin(24));
  OffloadBundle b;
  uint64_t off = kBundleHeaderSize;
  for (uint64_t i = 0; i < count; ++i) {
    Expected<BundleEntry> e = read_entry(bytes, off, i);
    if (!e) return e.error();
    b.total_size_ = std::max(b.total_size_, e->offset + e->size);
    b.entries_.push_back(std::move(*e));
  }
  b.total_size_ = std::max(b.total_size_, off);
  return b;
}

Expected<CompressedBundle> CompressedBundle::create(ByteView bytes) {
  if (!has_magic(bytes))
    return Error(ErrorCode::bad_magic, "expected the compressed bundle magic CCOB", bytes.origin(0));
  if (!bytes.contains(0, 8))
    return Error(ErrorCode::truncated, "compressed bundle header truncated", bytes.origin(bytes.size()));
  CompressedBundle c;
  c.version = bytes.read<uint16_t>(4);
  uint16_t method = bytes.read<uint16_t>(6);
  if (method > 1)
    return Error(ErrorCode::unsupported,
                 "compressed bundle method " + std::to_string(method) + " at offset " + hex(bytes.origin(6)) +
                     " is unknown: expected 0 (zlib) or 1 (zstd)",
                 bytes.origin(6));
  c.codec = static_cast<BundleCodec>(method);
  static const uint32_t header_sizes[] = {0, 20, 24, 32};
  if (c.version < 1 || c.version > 3)
    return Error(ErrorCode::unsupported_version,
                 "unsupported compressed bundle version " + std::to_string(c.version) + " at offset " +
                     hex(bytes.origin(4)) + ": expected 1, 2 or 3",
                 bytes.origin(4));
  c.header_size = header_sizes[c.version];
  if (!bytes.contains(0, c.header_size))
    return Error(ErrorCode::truncated,
                 "compressed bundle v" + std::to_string(c.version) + " header needs " + hex(c.header_size) +
                     " bytes, only " + hex(bytes.size()) + " are left",
                 bytes.origin(bytes.size()));
  if (c.version == 1) {
    c.uncompressed_size = bytes.read<uint32_t>(8);
    c.hash = bytes.read<uint64_t>(12);
    c.total_size = bytes.size();
  } else if (c.version == 2) {
    c.total_size = bytes.read<uint32_t>(8);
    c.uncompressed_size = bytes.read<uint32_t>(12);
    c.hash = bytes.read<uint64_t>(16);
  } else {
    c.total_size = bytes.read<uint64_t>(8);
    c.uncompressed_size = bytes.read<uint64_t>(16);
    c.hash = bytes.read<uint64_t>(24);
  }
  if (c.total_size < c.header_size || !bytes.contains(0, c.total_size))
    return Error(ErrorCode::out_of_bounds,
                 "compressed bundle total size " + hex(c.total_size) + " (at offset " + hex(bytes.origin(8)) +
                     ") does not fit the " + hex(bytes.size()) + " bytes available",
                 bytes.origin(8));
  c.payload = bytes.sub(c.header_size, c.total_size - c.header_size);
  return c;
}

Expected<std::vector<uint8_t>> CompressedBundle::decompress(uint64_t max_size) const {
  if (uncompressed_size > max_size)
    return Error(ErrorCode::too_large,
                 "compressed bundle claims " + hex(uncompressed_size) + " bytes, over the limit " + hex(max_size));
  Scratch scratch;
  Expected<ByteView> out = codec == BundleCodec::zstd ? decompress_zstd(payload, uncompressed_size, scratch)
                                                      : decompress_zlib(payload, uncompressed_size, scratch);
  if (!out) return out.error().within("compressed bundle payload at offset " + hex(payload.origin()));
  uint64_t actual = md5_low64(*out);
  if (actual != hash)
    return Error(ErrorCode::corrupt,
                 "compressed bundle at offset " + hex(payload.origin() - header_size) +
                     ": hash mismatch: the header says " + hex(hash) + ", the MD5 of the decompressed bundle gives " +
                     hex(actual),
                 payload.origin() - header_size);
  return std::vector<uint8_t>(out->data(), out->data() + out->size());
}

}  // namespace kir
