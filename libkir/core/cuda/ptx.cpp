// parse_ptx: kernels and globals of PTX text.
//
// Kernels are `.entry NAME ( .param ... )` declarations. Each parameter is
// `.param [.align A] .TYPE NAME[N]`; its size is the type's size times N and
// it is placed at the next multiple of its alignment (A, else the type size),
// as ptxas lays out the parameter buffer.
//
// The Proteus pass's module global (formats.md §5) is, in PTX,
// `.visible .global .align 1 .b8 _jit_bitcode_tu_…[N] = {66, 67, 192, 222, …};`:
// its N decimal byte values (nvcc leaves trailing zeros out; they are zero)
// become a DeviceCode::ir entry, so a kernel of the
// PTX image hashes the same IR as in the cubin (kir/hash/kernel_code.hpp).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include "kir/cuda/ptx.hpp"
#include "kir/support/demangle.hpp"

namespace kir {

namespace {

using std::string_view;

constexpr string_view kJitBitcodePrefix = "_jit_bitcode_";  // Proteus (formats.md §5)

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.' || c == '%';
}

/// Size in bytes of a PTX fundamental type (".u32" -> 4), 0 when not one.
uint32_t type_size(string_view t) {
  if (t.size() < 3 || t[0] != '.') return 0;
  char c = t[1];
  if (c != 'b' && c != 'u' && c != 's' && c != 'f') return 0;
  string_view bits = t.substr(2);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  if (bits == "128") return 16;
  return 0;
}

uint64_t parse_uint(string_view s) {
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || v > UINT64_MAX / 10 - 1) break;
    v = v * 10 + uint64_t(c - '0');
  }
  return v;
}

/// Split into whitespace-separated tokens, with "[N]" kept on its own.
std::vector<string_view> tokens(string_view s) {
  std::vector<string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    size_t b = i;
    if (i < s.size() && s[i] == '[') {
      while (i < s.size() && s[i] != ']') ++i;
      if (i < s.size()) ++i;
    } else {
      while (i < s.size() && !is_space(s[i]) && s[i] != '[') ++i;
    }
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

struct Declared {
  string_view name;
  uint32_t align = 0;
  uint64_t size = 0;
};

/// ".align 8 .b8 name[24]" -> {name, 8, 24}. Size 0 when no type was found.
Declared parse_declaration(string_view text) {
  Declared d;
  uint32_t elem = 0;
  uint64_t count = 1;
  std::vector<string_view> t = tokens(text);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ".align" && i + 1 < t.size() && elem == 0) {
      d.align = static_cast<uint32_t>(parse_uint(t[++i]));
    } else if (elem == 0 && type_size(t[i])) {
      elem = type_size(t[i]);
    } else if (t[i][0] == '[') {
      count *= parse_uint(t[i].substr(1));
    } else if (t[i][0] != '.' && elem != 0 && d.name.empty()) {
      d.name = t[i];
    }
  }
  d.size = elem * count;
  if (d.align == 0) d.align = elem ? elem : 1;
  return d;
}

/// The kernel declared by the `.entry` at `pos`, if its text is well formed.
bool parse_entry(string_view text, size_t pos, Kernel& k) {
  size_t i = pos + 6;  // past ".entry"
  while (i < text.size() && is_space(text[i])) ++i;
  size_t b = i;
  while (i < text.size() && is_ident(text[i])) ++i;
  if (i == b) return false;
  k.name = std::string(text.substr(b, i - b));
  while (i < text.size() && is_space(text[i])) ++i;
  if (i >= text.size() || text[i] != '(') return true;  // no parameters
  size_t close = text.find(')', i);
  if (close == string_view::npos) return false;
  string_view list = text.substr(i + 1, close - i - 1);
  uint64_t offset = 0;
  uint32_t ordinal = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    string_view one = list.substr(0, comma);
    list = comma == string_view::npos ? string_view() : list.substr(comma + 1);
    Declared d = parse_declaration(one);
    if (d.size == 0) continue;
    offset = align_up(offset, d.align);
    k.params.push_back({ordinal++, static_cast<uint32_t>(offset), static_cast<uint32_t>(d.size)});
    offset += d.size;
  }
  k.param_bytes = static_cast<uint32_t>(offset);
  return true;
}

/// The position just past the '}' matching the '{' at `open`. Function bodies
/// are most of a PTX file and hold few braces, so this jumps with memchr.
size_t skip_braces(string_view text, size_t open) {
  const char* p = text.data() + open + 1;
  const char* end = text.data() + text.size();
  int depth = 1;
  while (p < end) {
    const char* close = static_cast<const char*>(std::memchr(p, '}', size_t(end - p)));
    if (!close) return text.size();
    const char* inner = static_cast<const char*>(std::memchr(p, '{', size_t(close - p)));
    if (inner) {
      ++depth;
      p = inner + 1;
    } else {
      p = close + 1;
      if (--depth == 0) break;
    }
  }
  return size_t(p - text.data());
}

/// The initializer `{v0, v1, ...}` of byte array `name` (declared `size` bytes),
/// its '{' at `open` in `text`: the module the Proteus pass embedded.
Status parse_jit_bitcode(string_view text, size_t open, string_view name, uint64_t size, DeviceCode& code) {
  auto where = [&](size_t at) { return "PTX: initializer of " + std::string(name) + " at byte " + std::to_string(at); };
  EmbeddedModule m;
  m.name = std::string(name);
  m.bitcode.reserve(size);
  size_t i = open + 1;
  for (;;) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i >= text.size()) return Error(ErrorCode::truncated, where(open) + ": no closing '}'");
    if (text[i] == '}' && m.bitcode.empty()) break;  // "{}"
    size_t b = i;
    uint32_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && v <= 255) v = v * 10 + uint32_t(text[i++] - '0');
    if (i == b) return Error(ErrorCode::malformed, where(b) + ": expected a decimal byte value");
    if (v > 255) return Error(ErrorCode::malformed, where(b) + ": value out of the range of .b8 (0..255)");
    if (m.bitcode.size() == size)
      return Error(ErrorCode::malformed, where(b) + ": more than the " + std::to_string(size) + " values declared");
    m.bitcode.push_back(uint8_t(v));
    while (i < text.size() && is_space(text[i])) ++i;
    if (i >= text.size()) return Error(ErrorCode::truncated, where(open) + ": no closing '}'");
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') break;
    return Error(ErrorCode::malformed, where(i) + ": expected ',' or '}'");
  }
  // Fewer values than declared: the rest is zero (nvcc leaves trailing zeros out).
  m.bitcode.resize(size, 0);
  m.digest = xxh3_128(ByteView(m.bitcode.data(), m.bitcode.size()));
  code.ir.push_back(std::move(m));
  return {};
}

/// A top-level `.global` / `.const` variable definition (not `.extern`) on the
/// line at `pos`. A `.global .b8 _jit_bitcode_*[N] = {...}` also yields the IR
/// module it holds (DeviceCode::ir), as in the cubin.
Status parse_global(string_view text, size_t pos, string_view line, DeviceCode& code) {
  size_t eq = line.find('=');
  string_view decl = line.substr(0, eq);
  std::vector<string_view> t = tokens(decl);
  size_t i = 0;
  if (i < t.size() && (t[i] == ".visible" || t[i] == ".weak")) ++i;
  if (i >= t.size() || (t[i] != ".global" && t[i] != ".const")) return {};
  size_t start = decl.find(t[i]) + t[i].size();
  string_view rest = decl.substr(start);
  while (!rest.empty() && (rest.back() == ';' || is_space(rest.back()))) rest.remove_suffix(1);
  Declared d = parse_declaration(rest);
  if (d.name.empty()) return {};
  code.globals.push_back({std::string(d.name), "", d.size});
  if (eq == string_view::npos || d.name.rfind(kJitBitcodePrefix, 0) != 0) return {};
  size_t open = text.find_first_not_of(" \t\r\n", pos + eq + 1);
  if (open == string_view::npos || text[open] != '{')
    return Error(ErrorCode::malformed, "PTX: initializer of " + std::string(d.name) + " at byte " +
                                           std::to_string(pos + eq) + ": expected '{'");
  std::vector<string_view> types = tokens(rest);
  bool bytes =
      std::any_of(types.begin(), types.end(), [](string_view x) { return x == ".b8" || x == ".u8" || x == ".s8"; });
  if (!bytes)
    return Error(ErrorCode::malformed, "PTX: " + std::string(d.name) + " at byte " + std::to_string(pos) +
                                           ": a Proteus module global must be a byte array (.b8)");
  return parse_jit_bitcode(text, open, d.name, d.size, code);
}

/// Offset of a `.entry` token in `line`, or npos.
size_t find_entry(string_view line) {
  for (size_t at = line.find(".entry"); at != string_view::npos; at = line.find(".entry", at + 6))
    if ((at == 0 || is_space(line[at - 1])) && at + 6 < line.size() && is_space(line[at + 6])) return at;
  return string_view::npos;
}

}  // namespace

Expected<DeviceCode> parse_ptx(ByteView ptx) {
  string_view text = ptx.c_string(0);
  if (text.find(".version") == string_view::npos)
    return Error(ErrorCode::bad_magic, "PTX text has no .version directive");
  DeviceCode code;
  code.kind = ImageKind::ptx;
  // Walk the top level line by line; skip every brace-delimited body whole.
  size_t pos = 0;
  while (pos < text.size()) {
    const void* nl = std::memchr(text.data() + pos, '\n', text.size() - pos);
    size_t eol = nl ? size_t(static_cast<const char*>(nl) - text.data()) : text.size();
    string_view line = text.substr(pos, eol - pos);
    if (size_t at = find_entry(line); at != string_view::npos) {
      Kernel k;
      if (parse_entry(text, pos + at, k)) {
        k.demangled = demangle(k.name);
        code.kernels.push_back(std::move(k));
      }
    } else if (line.find(".global") != string_view::npos || line.find(".const") != string_view::npos) {
      if (Status st = parse_global(text, pos, line, code); !st) return st.error();
    }
    size_t open = line.find('{');
    pos = open == string_view::npos ? eol + 1 : skip_braces(text, pos + open);
  }
  return code;
}

}  // namespace kir
