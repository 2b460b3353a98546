// The on-disk layout of a recording (docs/record-format.md), described ONCE:
// the writer (chunk_store.cpp, record_builder.cpp) writes its headers through
// these fields, and the bindings export the same description
// (kir._core.record_format()) for the Python reader (python/kir/record.py),
// which keeps no copy of its own. Change a layout here and both follow.
#pragma once

#include <cstdint>
#include <cstring>

namespace kir::record::format {

/// The format version this writer writes, and every version a reader knows. Bumped
/// whenever a header or a metadata field (kir/record/metadata.hpp) changes.
/// 2: `launch.dynamic_hash` gone; `launch_identity`, `kernel.ptx_units` and
///    `kernel.jit_args` and every `stats` field always written.
/// 3: an allocation's `tolerance` (the app's annotation, kir/record.h; nil when none).
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kVersions[] = {1, 2, 3};
/// The value of a record's metadata key `format`.
inline constexpr char kMetadataFormat[] = "kir.record";
/// File names: DIR/records/<static>.<launch identity>[.rank<R>]<kRecordSuffix>,
/// DIR/chunks/<XXH3-128><kChunkSuffix>.
inline constexpr char kRecordSuffix[] = ".kirrec";
inline constexpr char kChunkSuffix[] = ".kirc";
/// The largest chunk (decoded bytes) a reader accepts; the recorder never writes a larger one
/// (KIR_RECORD_CHUNK_SIZE is capped to it).
inline constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;
/// A reader's bounds on a record's metadata besides its size: msgpack values (every map,
/// list, key, element and scalar; also at most one per 3 bytes of it, plus 65536) and maps
/// and lists nested in one another. The writer nests 4 deep, its densest metadata (a
/// kernel's 1-byte parameters) spends 3.3 bytes per value.
inline constexpr uint64_t kMaxMetadataValues = uint64_t(1) << 24;
inline constexpr uint64_t kMaxMetadataDepth = 16;

/// How a header field is stored: the magic's bytes, or a little-endian unsigned integer.
enum class FieldType : uint8_t { bytes, u32, u64 };

struct Field {
  const char* name;
  uint32_t offset;
  uint32_t size;
  FieldType type;
};

/// A fixed-size header: its magic and its fields, in file order.
struct Header {
  const char* magic;  // 8 bytes, no terminator in the file
  uint32_t size;
  const Field* fields;
  uint32_t count;

  constexpr const Field& operator[](uint32_t i) const { return fields[i]; }
};

namespace record_header {
inline constexpr Field magic{"magic", 0, 8, FieldType::bytes};
inline constexpr Field version{"version", 8, 4, FieldType::u32};
inline constexpr Field reserved{"reserved", 12, 4, FieldType::u32};
inline constexpr Field body_size{"body_size", 16, 8, FieldType::u64};
inline constexpr Field hash_high{"hash_high", 24, 8, FieldType::u64};  // XXH3-128 of the body
inline constexpr Field hash_low{"hash_low", 32, 8, FieldType::u64};
inline constexpr Field fields[] = {magic, version, reserved, body_size, hash_high, hash_low};
}  // namespace record_header

namespace chunk_header {
inline constexpr Field magic{"magic", 0, 8, FieldType::bytes};
inline constexpr Field version{"version", 8, 4, FieldType::u32};
inline constexpr Field codec{"codec", 12, 4, FieldType::u32};
inline constexpr Field raw_size{"raw_size", 16, 8, FieldType::u64};
inline constexpr Field stored_size{"stored_size", 24, 8, FieldType::u64};
inline constexpr Field hash_high{"hash_high", 32, 8, FieldType::u64};  // XXH3-128 of the raw bytes: the name
inline constexpr Field hash_low{"hash_low", 40, 8, FieldType::u64};
inline constexpr Field fields[] = {magic, version, codec, raw_size, stored_size, hash_high, hash_low};
}  // namespace chunk_header

inline constexpr Header kRecordHeader{"KIRRECRD", 40, record_header::fields, 6};
inline constexpr Header kChunkHeader{"KIRCHUNK", 48, chunk_header::fields, 7};

/// How a chunk's payload is stored.
enum class Codec : uint32_t { raw = 0, zstd = 1 };
struct CodecName {
  Codec codec;
  const char* name;
};
inline constexpr CodecName kCodecs[] = {{Codec::raw, "raw"}, {Codec::zstd, "zstd"}};

namespace detail {
constexpr uint32_t width(FieldType t) { return t == FieldType::u32 ? 4 : t == FieldType::u64 ? 8 : 0; }
/// Fields tile the header: each starts where the previous ends, integers have their
/// type's width, the magic comes first and is 8 bytes, and the last ends at `size`.
constexpr bool tiles(const Header& h) {
  uint32_t at = 0;
  for (uint32_t i = 0; i < h.count; ++i) {
    const Field& f = h[i];
    if (f.offset != at) return false;
    if (i == 0 ? (f.type != FieldType::bytes || f.size != 8) : f.size != width(f.type)) return false;
    at += f.size;
  }
  return at == h.size;
}
}  // namespace detail

static_assert(detail::tiles(kRecordHeader), "record header fields must tile the header");
static_assert(detail::tiles(kChunkHeader), "chunk header fields must tile the header");
static_assert(sizeof(record_header::fields) / sizeof(Field) == 6 && sizeof(chunk_header::fields) / sizeof(Field) == 7,
              "header field counts");

/// Store `value` in `header` at `field` (little-endian hosts only: x86-64, aarch64).
inline void put(uint8_t* header, const Field& field, uint64_t value) {
  if (field.type == FieldType::u32) {
    uint32_t v = static_cast<uint32_t>(value);
    std::memcpy(header + field.offset, &v, 4);
  } else {
    std::memcpy(header + field.offset, &value, 8);
  }
}

/// Store the header's magic at its start.
inline void put_magic(uint8_t* header, const Header& h) { std::memcpy(header, h.magic, 8); }

}  // namespace kir::record::format
