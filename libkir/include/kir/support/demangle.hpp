// Itanium C++ demangling of kernel names.
#pragma once

#include <string>

namespace kir {

/// Itanium C++ demangling (the name itself when it is not a mangled name).
std::string demangle(const std::string& name);

}  // namespace kir
