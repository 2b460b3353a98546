// Copying device memory into a record: regions are copied to the host through
// two pinned staging buffers on the recorder's own stream, each batch hashed,
// compressed and stored (RecordBuilder::snapshot, in parallel) while the next
// one is in flight. To keep the app waiting only as long as a device-side copy
// takes, regions can first be copied into device scratch memory (when there is
// room), and stored from there later, on another thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driver.hpp"
#include "kir/record/record_builder.hpp"

namespace kir::record {

class Snapshotter {
 public:
  Snapshotter(const RecorderDriver& driver, uint64_t staging_bytes, unsigned threads)
      : driver_(driver), staging_bytes_(staging_bytes), threads_(threads) {}

  /// Store regions `regions` (builder indices) of `builder` as their prologue or
  /// epilogue, reading each from `sources[i]` (default: the region's own
  /// address). An error names the region and the driver's error.
  Status copy(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue,
              const std::vector<uint64_t>* sources = nullptr);

  /// Device memory holding a copy of some regions, to be stored later.
  struct DeviceCopy {
    uint64_t scratch = 0;
    std::vector<uint64_t> sources;  // where each region's copy starts
  };
  /// Copy `regions` into fresh device scratch memory and wait for it: nullopt
  /// when the device lacks the room (copy() directly instead).
  std::optional<DeviceCopy> copy_on_device(const RecordBuilder& builder, const std::vector<size_t>& regions);
  /// Store a DeviceCopy (as copy() would the regions) and free its memory.
  Status store(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue, DeviceCopy& copied);
  /// Region `index`'s bytes read into host memory (for the reachability walk).
  Expected<std::vector<uint8_t>> read(uint64_t address, uint64_t size);

 private:
  Status prepare();         // the stream and the pinned staging buffers
  Status prepare_stream();  // the stream alone

  const RecorderDriver& driver_;
  uint64_t staging_bytes_;
  unsigned threads_;
  void* stream_ = nullptr;
  uint8_t* staging_[2] = {nullptr, nullptr};
};

}  // namespace kir::record
