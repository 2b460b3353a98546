// The `kir inspect` report as Python records (the JSON schema) and as text.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
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

/// The `kir inspect` table of the images for `targets` (processors: "sm_90",
/// "gfx90a") and of `kinds` (each: all when empty); codes[i], when given and
/// not null, adds the kernels of image i.
std::string render_table(const kir::Binary& b, const std::vector<std::string>& targets,
                         const std::vector<std::string>& kinds,
                         const std::vector<const kir::DeviceCode*>& codes);

}  // namespace kir_bindings
