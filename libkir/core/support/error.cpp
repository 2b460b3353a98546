#include "kir/support/error.hpp"

#include <cstdio>

namespace kir {

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace kir
