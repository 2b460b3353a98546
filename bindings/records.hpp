// The `kir inspect` report as Python records (the JSON schema).
#pragma once

#include <nanobind/nanobind.h>

#include "kir/binary.hpp"

namespace kir_bindings {

namespace nb = nanobind;

/// A DeviceCode as {"kernels": [...], "functions": [...], "globals": [...]}.
nb::dict code_records(const kir::DeviceCode& code, bool with_kernels = true);
/// The kernels' JSON array as json.dumps writes code_records' (with "ir_module"
/// from `links`, name -> module index), or None when a name needs escaping.
nb::object kernels_json(const kir::DeviceCode& code, nb::dict links);

/// Every image / container as the dicts of docs/json-schema.md, in file order.
nb::list image_records(const kir::Binary& b);
/// Every image as (index, container, kind, arch, fatbin version "MAJOR.MINOR" or None,
/// compression, stored size, size, id, obfuscated): the `kir inspect` table's.
nb::list image_rows(const kir::Binary& b);
nb::list container_records(const kir::Binary& b);
nb::object image_records_json(const kir::Binary& b, nb::object indices);
nb::object container_records_json(const kir::Binary& b, nb::object indices);

}  // namespace kir_bindings
