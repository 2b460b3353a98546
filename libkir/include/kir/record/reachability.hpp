// Which memory a launch can reach: starting from its pointer arguments (and
// any other roots), every 8-byte-aligned word of a reachable region whose value
// lands inside a known region makes that region reachable, transitively.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kir/support/bytes.hpp"

namespace kir::record {

struct MemoryRange {
  uint64_t address = 0, size = 0;
};

/// Indices (ascending) of the `ranges` reachable from `roots`. `ranges` must be
/// disjoint (any order). `contents(i)` gives range i's bytes; it is called at
/// most once per range, only for reachable ones.
std::vector<size_t> reachable_ranges(const std::vector<MemoryRange>& ranges, const std::vector<uint64_t>& roots,
                                     const std::function<ByteView(size_t)>& contents);

}  // namespace kir::record
