// Copying device memory into a record: regions are copied to the host through
// two pinned staging buffers on the recorder's own stream, each batch hashed,
// compressed and stored (RecordBuilder::snapshot, in parallel) while the next
// one is in flight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "driver.hpp"
#include "kir/record/record_builder.hpp"

namespace kir::record {

class Snapshotter {
 public:
  Snapshotter(const Driver& driver, uint64_t staging_bytes, unsigned threads)
      : driver_(driver), staging_bytes_(staging_bytes), threads_(threads) {}

  /// Store regions `regions` (builder indices) of `builder` as their prologue or
  /// epilogue. An error names the region and the driver's error.
  Status copy(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue);
  /// Region `index`'s bytes read into host memory (for the reachability walk).
  Expected<std::vector<uint8_t>> read(uint64_t address, uint64_t size);

 private:
  Status prepare();

  const Driver& driver_;
  uint64_t staging_bytes_;
  unsigned threads_;
  CUstream stream_ = nullptr;
  uint8_t* staging_[2] = {nullptr, nullptr};
};

}  // namespace kir::record
