// kir._core's record-format pieces: the RecordBuilder the in-app recorder
// uses, the reachability walk, and zstd decoding for the Python reader.
#pragma once

#include <nanobind/nanobind.h>

#include "kir/support/error.hpp"

namespace kir_bindings {

/// Raise kir.errors.KirError with `e`'s message.
[[noreturn]] void raise_kir_error(const kir::Error& e);

void bind_recording(nanobind::module_& m);

/// kir._core.Cache and the cache entry codec (bindings/cache.cpp).
void bind_cache(nanobind::module_& m);

}  // namespace kir_bindings
