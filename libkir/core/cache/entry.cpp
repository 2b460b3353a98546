// The cache entry format (docs/cache.md "Entry layout"): writer and checked reader.
#include <cstring>

#include "kir/cache.hpp"
#include "kir/model.hpp"

namespace kir::cache {

namespace {

// The kinds a cache holds; an entry stores its ImageKind value (kir.h's KIR_KIND_*).
constexpr ImageKind kKinds[] = {ImageKind::cubin, ImageKind::ptx, ImageKind::code_object};

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(v >> (8 * i));
}
void append32(std::vector<uint8_t>& b, uint32_t v) {
  b.resize(b.size() + 4);
  put32(b, b.size() - 4, v);
}
void append(std::vector<uint8_t>& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }

/// 16 bytes, high half first, big-endian: the hex form's order.
void put_hash(uint8_t* out, const Hash128& h) {
  for (int i = 0; i < 8; ++i) {
    out[i] = uint8_t(h.high >> (56 - 8 * i));
    out[8 + i] = uint8_t(h.low >> (56 - 8 * i));
  }
}
Hash128 get_hash(const uint8_t* in) {
  Hash128 h;
  for (int i = 0; i < 8; ++i) {
    h.high = (h.high << 8) | in[i];
    h.low = (h.low << 8) | in[8 + i];
  }
  return h;
}

uint64_t align_up(uint64_t n) { return (n + kCodeAlignment - 1) / kCodeAlignment * kCodeAlignment; }

/// Empty when `s` is well-formed UTF-8 with no NUL; else what is wrong and the
/// offset (in `s`) of the first bad byte.
bool utf8_problem(std::string_view s, size_t& at, const char*& what) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size();
  for (size_t i = 0; i < n;) {
    uint8_t c = p[i];
    if (c == 0) return at = i, what = "a NUL byte", true;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n - i) return at = i, what = "invalid UTF-8", true;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return at = i, what = "invalid UTF-8", true;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t min_of[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_of[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return at = i, what = "invalid UTF-8", true;
    i += len;
  }
  return false;
}

Error fail(ErrorCode code, uint64_t offset, const std::string& message) {
  return Error(code, "at byte offset " + hex(offset) + ": " + message, offset);
}

}  // namespace

uint32_t code_kind_number(std::string_view name) {
  for (ImageKind k : kKinds)
    if (name == kir::name(k)) return static_cast<uint32_t>(k);
  return 0;
}

const char* code_kind_name(uint32_t number) {
  for (ImageKind k : kKinds)
    if (number == static_cast<uint32_t>(k)) return kir::name(k);
  return nullptr;
}

std::string entry_relative_path(const Hash128& key) {
  std::string h = key.hex();
  return h.substr(0, 2) + "/" + h;
}

Expected<std::vector<uint8_t>> encode_entry(const EntryView& e) {
  uint32_t kind = code_kind_number(e.kind);
  if (!kind)
    return Error(ErrorCode::invalid_argument,
                 "code kind '" + std::string(e.kind) + "' is not one a cache holds (cubin, ptx, code-object)");
  size_t at = 0;
  const char* what = nullptr;
  if (e.arch.empty() || e.arch.size() > kMaxArch)
    return Error(ErrorCode::invalid_argument,
                 "arch '" + std::string(e.arch) + "': must be 1 to " + std::to_string(kMaxArch) + " bytes");
  if (utf8_problem(e.arch, at, what)) return Error(ErrorCode::invalid_argument, "arch: " + std::string(what));
  if (e.meta.size() > kMaxMetaCount)
    return Error(ErrorCode::too_large,
                 std::to_string(e.meta.size()) + " metadata items: at most " + std::to_string(kMaxMetaCount));
  if (e.code.size() > kMaxCodeSize)
    return Error(ErrorCode::too_large, "code of " + hex(e.code.size()) + " bytes: at most " + hex(kMaxCodeSize));
  std::vector<uint8_t> meta;
  for (const auto& [k, v] : e.meta) {
    if (k.empty()) return Error(ErrorCode::invalid_argument, "a metadata key is empty");
    for (std::string_view s : {k, v})
      if (utf8_problem(s, at, what))
        return Error(ErrorCode::invalid_argument, "metadata '" + std::string(k) + "': " + what);
    append32(meta, uint32_t(k.size()));
    append(meta, k);
    append32(meta, uint32_t(v.size()));
    append(meta, v);
    if (meta.size() > kMaxMetaBytes)
      return Error(ErrorCode::too_large, "metadata exceeds " + hex(kMaxMetaBytes) + " bytes");
  }
  uint64_t code_at = align_up(kHeaderSize + e.arch.size() + meta.size());
  std::vector<uint8_t> b(code_at + e.code.size() + kChecksumSize, 0);
  std::memcpy(b.data(), kMagic, 8);
  put32(b, field::kVersion, kFormatVersion);
  put32(b, field::kHeaderSize, kHeaderSize);
  put_hash(b.data() + field::kKey, e.key);
  put32(b, field::kCodeKind, kind);
  put32(b, field::kMetaCount, uint32_t(e.meta.size()));
  put64(b, field::kCodeSize, e.code.size());
  put64(b, field::kMetaBytes, meta.size());
  put32(b, field::kArchSize, uint32_t(e.arch.size()));
  std::memcpy(b.data() + kHeaderSize, e.arch.data(), e.arch.size());
  if (!meta.empty()) std::memcpy(b.data() + kHeaderSize + e.arch.size(), meta.data(), meta.size());
  if (e.code.size()) std::memcpy(b.data() + code_at, e.code.data(), e.code.size());
  put_hash(b.data() + code_at + e.code.size(), xxh3_128(ByteView(b.data(), code_at + e.code.size())));
  return b;
}

Expected<EntryView> parse_entry(ByteView bytes, const Hash128* expected) {
  const uint64_t size = bytes.size();
  if (size < kHeaderSize + kChecksumSize)
    return fail(ErrorCode::truncated, size,
                "truncated: " + hex(size) + " bytes, shorter than the header and checksum (" +
                    hex(kHeaderSize + kChecksumSize) + ")");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0)
    return fail(ErrorCode::bad_magic, 0, "not a kir cache entry (bad magic)");
  uint32_t version = bytes.read<uint32_t>(field::kVersion);
  if (version != kFormatVersion)
    return fail(
        ErrorCode::unsupported_version, field::kVersion,
        "format version " + std::to_string(version) + " (this kir reads " + std::to_string(kFormatVersion) + ")");
  uint32_t header = bytes.read<uint32_t>(field::kHeaderSize);
  if (header != kHeaderSize)
    return fail(ErrorCode::malformed, field::kHeaderSize,
                "header size " + hex(header) + " (expected " + hex(kHeaderSize) + ")");
  if (bytes.read<uint32_t>(field::kReserved) != 0)
    return fail(ErrorCode::malformed, field::kReserved, "reserved field is not 0");
  uint32_t kind = bytes.read<uint32_t>(field::kCodeKind);
  const char* kind_name = code_kind_name(kind);
  if (!kind_name) return fail(ErrorCode::malformed, field::kCodeKind, "unknown code kind " + std::to_string(kind));
  uint32_t meta_count = bytes.read<uint32_t>(field::kMetaCount);
  if (meta_count > kMaxMetaCount)
    return fail(ErrorCode::too_large, field::kMetaCount,
                std::to_string(meta_count) + " metadata items (at most " + std::to_string(kMaxMetaCount) + ")");
  uint64_t code_size = bytes.read<uint64_t>(field::kCodeSize);
  uint64_t meta_bytes = bytes.read<uint64_t>(field::kMetaBytes);
  uint32_t arch_size = bytes.read<uint32_t>(field::kArchSize);
  if (arch_size == 0 || arch_size > kMaxArch)
    return fail(ErrorCode::malformed, field::kArchSize,
                "arch size " + std::to_string(arch_size) + " (1 to " + std::to_string(kMaxArch) + ")");
  if (meta_bytes > kMaxMetaBytes)
    return fail(ErrorCode::too_large, field::kMetaBytes,
                "metadata size " + hex(meta_bytes) + " (at most " + hex(kMaxMetaBytes) + ")");
  if (code_size > kMaxCodeSize)
    return fail(ErrorCode::too_large, field::kCodeSize,
                "code size " + hex(code_size) + " (at most " + hex(kMaxCodeSize) + ")");
  // Every size is bounded above, so this sum cannot overflow.
  uint64_t code_at = align_up(kHeaderSize + arch_size + meta_bytes);
  uint64_t total = code_at + code_size + kChecksumSize;
  if (size < total)
    return fail(ErrorCode::truncated, size,
                "truncated: the header describes " + hex(total) + " bytes, the file has " + hex(size));
  if (size > total)
    return fail(ErrorCode::malformed, total,
                hex(size - total) + " bytes after the checksum (the header describes " + hex(total) + ")");
  Hash128 stored = get_hash(bytes.data() + code_at + code_size);
  Hash128 actual = xxh3_128(ByteView(bytes.data(), code_at + code_size));
  if (stored != actual)
    return fail(ErrorCode::corrupt, code_at + code_size,
                "checksum mismatch: stored " + stored.hex() + ", computed " + actual.hex() + " over bytes 0x0.." +
                    hex(code_at + code_size) + " (the entry is damaged)");
  EntryView e;
  e.key = get_hash(bytes.data() + field::kKey);
  if (expected && e.key != *expected)
    return fail(ErrorCode::malformed, field::kKey, "holds key " + e.key.hex() + ", not " + expected->hex());
  e.kind = kind_name;
  size_t bad = 0;
  const char* what = nullptr;
  e.arch = ByteView(bytes.data() + kHeaderSize, arch_size).chars();
  if (utf8_problem(e.arch, bad, what))
    return fail(ErrorCode::malformed, kHeaderSize + bad, std::string("arch: ") + what);
  uint64_t at = kHeaderSize + arch_size, end = at + meta_bytes;
  e.meta.reserve(meta_count);
  for (uint32_t i = 0; i < meta_count; ++i) {
    std::string_view kv[2];
    for (int j = 0; j < 2; ++j) {
      if (end - at < 4)
        return fail(ErrorCode::out_of_bounds, at,
                    "metadata item " + std::to_string(i) + " runs past the metadata's end (" + hex(end) + ")");
      uint32_t n = bytes.read<uint32_t>(at);
      if (n > end - at - 4)
        return fail(ErrorCode::out_of_bounds, at,
                    "metadata item " + std::to_string(i) + (j ? " value" : " key") + " of " + hex(n) +
                        " bytes runs past the metadata's end (" + hex(end) + ")");
      kv[j] = ByteView(bytes.data() + at + 4, n).chars();
      if (utf8_problem(kv[j], bad, what))
        return fail(ErrorCode::malformed, at + 4 + bad,
                    "metadata item " + std::to_string(i) + (j ? " value: " : " key: ") + what);
      at += 4 + uint64_t(n);
    }
    if (kv[0].empty())
      return fail(ErrorCode::malformed, at - 8 - kv[1].size(),
                  "metadata item " + std::to_string(i) + " has an empty key");
    e.meta.emplace_back(kv[0], kv[1]);
  }
  if (at != end)
    return fail(ErrorCode::malformed, at,
                hex(end - at) + " bytes of metadata after its " + std::to_string(meta_count) + " items");
  for (uint64_t p = end; p < code_at; ++p)
    if (bytes.data()[p]) return fail(ErrorCode::malformed, p, "padding before the code is not zero");
  e.code = bytes.sub(code_at, code_size);
  return e;
}

}  // namespace kir::cache
