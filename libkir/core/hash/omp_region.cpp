#include "kir/hash/omp_region.hpp"

#include "kir/object/elf.hpp"

namespace kir {

namespace {

constexpr std::string_view kPrefix = "__omp_offloading_";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// Lowercase hex digits from `s` up to '_' (1 to 8 of them, as `%x` of an unsigned
/// prints); advances `s` past the '_'.
std::optional<uint32_t> hex_field(std::string_view& s) {
  size_t n = 0;
  uint32_t v = 0;
  while (n < s.size() && is_hex(s[n])) v = v << 4 | uint32_t(is_digit(s[n]) ? s[n] - '0' : s[n] - 'a' + 10), ++n;
  if (n == 0 || n > 8 || n >= s.size() || s[n] != '_' || (n > 1 && s[0] == '0')) return std::nullopt;
  s.remove_prefix(n + 1);
  return v;
}

/// A decimal without leading zeros that fits 32 bits.
std::optional<uint32_t> decimal(std::string_view s) {
  if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT32_MAX) return std::nullopt;
  return uint32_t(v);
}

}  // namespace

std::optional<OmpRegionName> parse_omp_region_name(std::string_view name) {
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view rest = name.substr(kPrefix.size());
  OmpRegionName region;
  std::optional<uint32_t> device = hex_field(rest), file = device ? hex_field(rest) : std::nullopt;
  if (!file) return std::nullopt;
  region.device_id = *device;
  region.file_id = *file;
  // P may hold "_l<digits>" itself: the last "_l<L>" (with an optional "_<C>") ends it.
  std::string_view tail = rest;
  size_t underscore = tail.rfind('_');
  if (underscore != std::string_view::npos && underscore + 1 < tail.size() && is_digit(tail[underscore + 1])) {
    if (std::optional<uint32_t> count = decimal(tail.substr(underscore + 1)); count && *count != 0) {
      size_t l = tail.rfind("_l", underscore - 1);
      if (l != std::string_view::npos && l > 0 && l + 2 < underscore) {
        if (std::optional<uint32_t> line = decimal(tail.substr(l + 2, underscore - l - 2))) {
          region.parent = std::string(tail.substr(0, l));
          region.line = *line;
          region.count = *count;
          return region;
        }
      }
    }
  }
  size_t l = tail.rfind("_l");
  if (l == std::string_view::npos || l == 0) return std::nullopt;
  std::optional<uint32_t> line = decimal(tail.substr(l + 2));
  if (!line) return std::nullopt;
  region.parent = std::string(tail.substr(0, l));
  region.line = *line;
  return region;
}

std::string normalized_omp_region_name(const OmpRegionName& region) {
  std::string out = std::string(kPrefix) + "0_0_" + region.parent + "_l" + std::to_string(region.line);
  if (region.count) out += "_" + std::to_string(region.count);
  return out;
}

std::string zero_omp_region_ids(ByteView code) {
  std::string out(reinterpret_cast<const char*>(code.data()), code.size());
  for (size_t at = out.find(kPrefix); at != std::string::npos; at = out.find(kPrefix, at + 1)) {
    size_t p = at + kPrefix.size(), ends[2] = {0, 0}, fields = 0;
    for (; fields < 2; ++fields) {  // <hex>_<hex>_
      size_t start = p;
      while (p < out.size() && is_hex(out[p])) ++p;
      if (p == start || p >= out.size() || out[p] != '_') break;
      ends[fields] = p++;
    }
    if (fields < 2) continue;
    for (size_t i = at + kPrefix.size(); i < ends[1]; ++i)
      if (i != ends[0]) out[i] = '0';
  }
  return out;
}

std::optional<Hash128> omp_region_identity_of_image(std::string_view kernel, std::string_view image_kind,
                                                    ByteView image) {
  std::optional<OmpRegionName> region = parse_omp_region_name(kernel);
  if (!region) return std::nullopt;
  // A cubin keeps each kernel's code and attributes in sections of its own: `.text.<K>`
  // and `.nv.info.<K>`. Their bytes name no symbol; the rest of the image (data, the
  // OpenMP location strings with the source file's absolute path, relocations into
  // them, other regions) does not enter.
  std::string code;
  if (ElfFile::is_elf(image))
    if (Expected<ElfFile> elf = ElfFile::create(image)) {
      for (std::string_view prefix : {".text.", ".nv.info."})
        for (const ElfSection& s : elf->sections())
          if (s.name.size() == prefix.size() + kernel.size() && s.name.substr(0, prefix.size()) == prefix &&
              s.name.substr(prefix.size()) == kernel) {
            uint64_t size = s.data.size();
            code.append(prefix).append(reinterpret_cast<const char*>(&size), 8);
            code.append(zero_omp_region_ids(s.data));
          }
    }
  if (code.empty()) code = zero_omp_region_ids(image);  // no such section: the whole image
  return omp_region_identity(normalized_omp_region_name(*region), image_kind,
                             xxh3_128(ByteView(reinterpret_cast<const uint8_t*>(code.data()), code.size())));
}

}  // namespace kir
