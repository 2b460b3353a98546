// The `kir inspect` report as Python records (the JSON schema) and as text.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kir/binary.hpp"

namespace kir_bindings {

namespace nb = nanobind;

/// A DeviceCode as {"kernels": [...], "functions": [...], "globals": [...]}.
nb::dict code_records(const kir::DeviceCode& code);

/// Every image / container as the dicts of docs/json-schema.md, in file order.
nb::list image_records(const kir::Binary& b);
nb::list container_records(const kir::Binary& b);

/// A note printed after a kernel's line: (image index, mangled name) -> text.
using KernelNotes = std::map<std::pair<uint32_t, std::string>, std::string>;

/// The `kir inspect` table of the images for `targets` (processors: "sm_90",
/// "gfx90a") and of `kinds` (each: all when empty); codes[i], when given and
/// not null, adds the kernels of image i, each followed by its note if any.
std::string render_table(const kir::Binary& b, const std::vector<std::string>& targets,
                         const std::vector<std::string>& kinds,
                         const std::vector<const kir::DeviceCode*>& codes, const KernelNotes& notes);

}  // namespace kir_bindings
