// One JSON string literal from any bytes, as the hook's clients write their JSON
// lines (the tracing client, the JIT client's counters): quotes and backslashes
// escaped, control characters as \u00XX; other bytes pass as they are.
#pragma once

#include <cstdio>
#include <string>

namespace kir {

inline std::string json_quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
      continue;
    }
    q += c;
  }
  return q + "\"";
}

}  // namespace kir
