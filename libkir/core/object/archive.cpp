#include "kir/object/archive.hpp"

#include <string_view>

namespace kir {

namespace {

constexpr uint64_t kMagicSize = 8;
constexpr uint64_t kHeaderSize = 60;

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

/// Parse a space-padded decimal field; nullopt-like false on bad digits.
bool parse_decimal(std::string_view field, uint64_t& out) {
  field = trim_right(field);
  if (field.empty()) return false;
  out = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return false;
    if (out > (UINT64_MAX - 9) / 10) return false;
    out = out * 10 + uint64_t(c - '0');
  }
  return true;
}

/// Resolve a member name: GNU "/N" long names, BSD "#1/N", plain "name/".
Expected<std::string> member_name(std::string_view raw, ByteView long_names, ByteView& data, uint64_t header_offset) {
  raw = trim_right(raw);
  if (raw.size() > 1 && raw[0] == '/') {
    uint64_t off = 0;
    if (!parse_decimal(raw.substr(1), off) || off >= long_names.size())
      return Error(ErrorCode::malformed,
                   "archive member header at offset " + hex(header_offset) + " names long-name offset '" +
                       std::string(raw.substr(1)) + "', which is not in the long-name table",
                   data.origin());
    std::string_view rest = long_names.chars().substr(off);
    size_t end = rest.find('\n');
    std::string_view name = rest.substr(0, end);
    if (!name.empty() && name.back() == '/') name.remove_suffix(1);
    return std::string(name);
  }
  if (raw.substr(0, 3) == "#1/") {
    uint64_t n = 0;
    if (!parse_decimal(raw.substr(3), n) || n > data.size())
      return Error(ErrorCode::malformed, "archive member header at offset " + hex(header_offset) +
                                             " has a BSD name length that does not fit its data");
    std::string name(data.c_string(0).substr(0, n));
    data = data.from(n);
    return name;
  }
  if (!raw.empty() && raw.back() == '/') raw.remove_suffix(1);
  return std::string(raw);
}

}  // namespace

Expected<Archive> Archive::create(ByteView bytes) {
  if (!is_archive(bytes))
    return Error(ErrorCode::bad_magic, "not an ar archive (no \"!<arch>\\n\" magic at offset 0x0)", bytes.origin(0));
  Archive a;
  ByteView long_names;
  uint64_t off = kMagicSize;
  while (off < bytes.size()) {
    if (!bytes.contains(off, kHeaderSize))
      return Error(ErrorCode::truncated,
                   "archive member header at offset " + hex(off) + " is truncated: the header needs 60 bytes, " +
                       hex(bytes.size() - off) + " are left",
                   bytes.origin(off));
    ByteView header = bytes.sub(off, kHeaderSize);
    if (header.read<uint16_t>(58) != 0x0a60)  // "`\n"
      return Error(
          ErrorCode::malformed,
          "archive member header at offset " + hex(off) + " has no \"`\\n\" terminator at offset " + hex(off + 58),
          bytes.origin(off + 58));
    uint64_t size = 0;
    if (!parse_decimal(header.chars().substr(48, 10), size))
      return Error(ErrorCode::malformed,
                   "archive member header at offset " + hex(off) + " has invalid size field '" +
                       std::string(trim_right(header.chars().substr(48, 10))) + "'",
                   bytes.origin(off + 48));
    if (!bytes.contains(off + kHeaderSize, size))
      return Error(ErrorCode::out_of_bounds,
                   "archive member at offset " + hex(off) + " (size " + hex(size) +
                       ") runs past the end of the archive (size " + hex(bytes.size()) + ")",
                   bytes.origin(off));
    ByteView data = bytes.sub(off + kHeaderSize, size);
    std::string_view raw = trim_right(header.chars().substr(0, 16));
    if (raw == "//") {
      long_names = data;
    } else if (raw != "/" && raw != "/SYM64/" && raw != "__.SYMDEF" && raw != "__.SYMDEF SORTED") {
      Expected<std::string> name = member_name(raw, long_names, data, off);
      if (!name) return name.error();
      a.members_.push_back({std::move(*name), off, data});
    }
    off = align_up(off + kHeaderSize + size, 2);
  }
  return a;
}

}  // namespace kir
