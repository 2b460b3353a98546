#include "kir/support/error.hpp"

#include <cerrno>
#include <cstdio>

namespace kir {

const char* error_code_name(ErrorCode code) {
  static const char* const names[kErrorCodes] = {
      "none",    "bad_magic", "truncated", "out_of_bounds", "malformed", "unsupported_version", "unsupported",
      "corrupt", "too_large", "io",        "permission",    "not_found", "invalid_argument",    "internal"};
  auto i = static_cast<uint32_t>(code);
  return i < kErrorCodes ? names[i] : "internal";
}

ErrorCode errno_code(int error_number) {
  if (error_number == ENOENT) return ErrorCode::not_found;
  if (error_number == EACCES || error_number == EPERM) return ErrorCode::permission;
  return ErrorCode::io;
}

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace kir
