// The kernel-name patterns of `kir record --kernels` (KIR_RECORD_KERNELS): one
// dialect, ECMAScript as std::regex compiles it, checked by the CLI with the
// same function the recorder uses (the binding _core.check_kernel_regex), and
// never thrown out of: a pattern std::regex refuses is an Error.
#pragma once

#include <exception>
#include <regex>
#include <string>

#include "kir/support/error.hpp"

namespace kir {

inline constexpr std::regex::flag_type kKernelRegexFlags = std::regex::ECMAScript;

/// `pattern` compiled as the recorder matches kernel names, or why std::regex refuses it.
inline Expected<std::regex> kernel_regex(const std::string& pattern) {
  try {
    return std::regex(pattern, kKernelRegexFlags);
  } catch (const std::exception& e) {  // std::regex_error; std::bad_alloc for a huge one
    return Error(std::string("not a valid ECMAScript regular expression (std::regex: ") + e.what() + ")");
  }
}

/// Whether `name` contains a match of `re`; an Error when std::regex gives up
/// (its complexity or stack limits on a pathological pattern).
inline Expected<bool> kernel_regex_search(const std::string& name, const std::regex& re) {
  try {
    return std::regex_search(name, re);
  } catch (const std::exception& e) {
    return Error(std::string("std::regex could not match ") + name + ": " + e.what());
  }
}

}  // namespace kir
