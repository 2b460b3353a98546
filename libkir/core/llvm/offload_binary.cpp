#include "kir/llvm/offload_binary.hpp"

#include "kir/support/compression.hpp"

namespace kir {

namespace {

constexpr uint64_t kEntrySize = 40;
constexpr uint64_t kMaxEntries = 1 << 16;
constexpr uint64_t kMaxStrings = 1 << 12;

std::string entry_label(uint64_t index) { return "offloading entry #" + std::to_string(index); }

}  // namespace

std::string OffloadBinaryEntry::string(const std::string& key) const {
  for (const auto& [k, v] : strings)
    if (k == key) return v;
  return "";
}

ImageKind offload_image_kind(uint16_t kind) {
  // LLVM's ImageKind (llvm/Object/OffloadBinary.h): IMG_None, IMG_Object,
  // IMG_Bitcode, IMG_Cubin, IMG_Fatbinary, IMG_PTX, IMG_SPIRV.
  static const ImageKind kinds[] = {ImageKind::unknown, ImageKind::object, ImageKind::bitcode, ImageKind::cubin,
                                    ImageKind::fatbin,  ImageKind::ptx,    ImageKind::spirv};
  return kind < 7 ? kinds[kind] : ImageKind::unknown;
}

std::string offload_kind_name(uint16_t kind) {
  switch (kind) {
    case 0: return "none";
    case 1: return "openmp";
    case 2: return "cuda";
    case 3:
    case 4: return "hip";
    case 8: return "sycl";
    default: return "unknown-" + std::to_string(kind);
  }
}

Expected<OffloadBinary> OffloadBinary::create(ByteView bytes) {
  if (!has_magic(bytes))
    return Error(ErrorCode::bad_magic, "expected the offloading binary magic 10 ff 10 ad", bytes.origin(0));
  if (!bytes.contains(0, 32))
    return Error(ErrorCode::truncated,
                 "offloading binary header needs 0x20 bytes, only " + hex(bytes.size()) + " are left",
                 bytes.origin(bytes.size()));
  OffloadBinary b;
  b.version_ = bytes.read<uint32_t>(4);
  b.total_size_ = bytes.read<uint64_t>(8);
  uint64_t entries_offset = bytes.read<uint64_t>(16);
  uint64_t table = bytes.read<uint64_t>(24);
  if (b.version_ < 1 || b.version_ > 3)
    return Error(ErrorCode::unsupported_version,
                 "unsupported offloading binary version " + std::to_string(b.version_) + " at offset " +
                     hex(bytes.origin(4)) + ": expected 1, 2 or 3",
                 bytes.origin(4));
  if (!bytes.contains(0, b.total_size_) || b.total_size_ < 32)
    return Error(ErrorCode::out_of_bounds,
                 "offloading binary size " + hex(b.total_size_) + " (at offset " + hex(bytes.origin(8)) +
                     ") does not fit the " + hex(bytes.size()) + " bytes available",
                 bytes.origin(8));
  ByteView own = bytes.sub(0, b.total_size_);
  uint64_t count = b.version_ == 1 ? table / kEntrySize : table;
  if (b.version_ == 3 && own.contains(32, 8) && own.read<uint64_t>(32) != 0) {
    uint64_t inflated_size = own.read<uint64_t>(32);
    if (entries_offset > own.size())
      return Error(ErrorCode::out_of_bounds,
                   "offloading binary entries offset " + hex(entries_offset) + " lies past its end");
    ByteView packed = own.from(entries_offset);
    Scratch scratch;
    uint64_t body = inflated_size > entries_offset ? inflated_size - entries_offset : 0;
    Expected<ByteView> out = packed.starts_with("\x28\xB5\x2F\xFD") ? decompress_zstd(packed, body, scratch)
                                                                    : decompress_zlib(packed, body, scratch);
    if (!out) return out.error().within("compressed offloading binary at offset " + hex(own.origin()));
    auto inflated = std::make_shared<std::vector<uint8_t>>(own.data(), own.data() + entries_offset);
    inflated->insert(inflated->end(), out->data(), out->data() + out->size());
    b.inflated_ = inflated;
    own = ByteView(inflated->data(), inflated->size());
  }
  if (count > kMaxEntries)
    return Error(
        ErrorCode::too_large,
        "offloading binary claims " + std::to_string(count) + " entries (at offset " + hex(bytes.origin(24)) + ")",
        bytes.origin(24));
  if (Status s = b.read_entries(own, entries_offset, count); !s) return s.error();
  return b;
}

Status OffloadBinary::read_entries(ByteView bytes, uint64_t entries_offset, uint64_t count) {
  uint64_t string_size = version_ == 1 ? 16 : 24;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t at = entries_offset + i * kEntrySize;
    if (!bytes.contains(at, kEntrySize))
      return Error(ErrorCode::out_of_bounds,
                   entry_label(i) + " at offset " + hex(bytes.origin(at)) + " runs past the end of the binary",
                   bytes.origin(at));
    OffloadBinaryEntry e;
    e.image_kind = bytes.read<uint16_t>(at);
    e.offload_kind = bytes.read<uint16_t>(at + 2);
    e.flags = bytes.read<uint32_t>(at + 4);
    uint64_t strings = bytes.read<uint64_t>(at + 8), nstrings = bytes.read<uint64_t>(at + 16);
    uint64_t image = bytes.read<uint64_t>(at + 24), image_size = bytes.read<uint64_t>(at + 32);
    if (nstrings > kMaxStrings || !bytes.contains(strings, nstrings * string_size))
      return Error(ErrorCode::out_of_bounds, entry_label(i) + ": string map at offset " + hex(strings) + " (" +
                                                 std::to_string(nstrings) +
                                                 " entries) runs past the end of the binary");
    if (!bytes.contains(image, image_size))
      return Error(ErrorCode::out_of_bounds, entry_label(i) + ": image at offset " + hex(image) + " (size " +
                                                 hex(image_size) + ") runs past the end of the binary (size " +
                                                 hex(bytes.size()) + ")");
    for (uint64_t j = 0; j < nstrings; ++j) {
      uint64_t s = strings + j * string_size;
      uint64_t key = bytes.read<uint64_t>(s), value = bytes.read<uint64_t>(s + 8);
      if (key >= bytes.size() || value > bytes.size())
        return Error(ErrorCode::out_of_bounds,
                     entry_label(i) + ": string #" + std::to_string(j) + " points outside the binary");
      std::string_view v = string_size == 16 ? bytes.c_string(value)
                           : bytes.contains(value, bytes.read<uint64_t>(s + 16))
                               ? bytes.sub(value, bytes.read<uint64_t>(s + 16)).chars()
                               : std::string_view();
      e.strings.emplace_back(std::string(bytes.c_string(key)), std::string(v));
    }
    e.image = bytes.sub(image, image_size);
    entries_.push_back(std::move(e));
  }
  return {};
}

}  // namespace kir
