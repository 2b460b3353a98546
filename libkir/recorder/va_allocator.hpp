// Device memory at stable virtual addresses for recording (docs/recording.md):
// one range reserved at a fixed address with the driver's VMM API, physical
// memory created and mapped per allocation when it is made and released when
// it is freed. Small allocations share a page (the mapping granularity) and
// the page goes when its last allocation does. Replay reserves the same range,
// so pointers stored inside buffers stay valid.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "driver.hpp"

namespace kir::record {

class VaAllocator {
 public:
  VaAllocator(const RecorderDriver& driver, uint64_t base, uint64_t size) : driver_(driver), base_(base), size_(size) {}

  /// Reserve the range on first use; false (and why()) when it cannot be had
  /// at the asked address.
  bool ready();
  /// An address for `size` bytes, 0 when the range is full or the driver
  /// refuses (why() says which).
  uint64_t allocate(uint64_t size);
  /// Release an allocation this allocator made: false when it is not one.
  bool release(uint64_t address);
  bool holds(uint64_t address) const { return reserved_ && address - base_ < size_; }

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  /// Why the range or the last allocation could not be had (a copy: any thread may ask).
  std::string why() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return why_;
  }

 private:
  struct Mapping {
    uint64_t address = 0, size = 0;
    uint64_t handle = 0;
    uint32_t allocations = 0;
  };
  static constexpr uint64_t kSmall = 64 << 10;  // allocations up to this share pages
  static constexpr uint64_t kAlignment = 512;   // as cudaMalloc aligns

  bool reserve();
  Mapping* map_new(uint64_t size);
  void unmap(Mapping& m);
  uint64_t take_range(uint64_t size);
  void return_range(uint64_t address, uint64_t size);

  const RecorderDriver& driver_;
  uint64_t base_, size_;
  mutable std::mutex mutex_;
  bool tried_ = false, reserved_ = false;
  int device_ = 0;
  uint64_t granularity_ = 2 << 20;
  std::string why_;
  std::map<uint64_t, uint64_t> free_;         // unused address ranges: start -> length
  std::map<uint64_t, Mapping> mappings_;      // by address
  std::map<uint64_t, uint64_t> allocations_;  // allocation address -> its mapping's address
  uint64_t small_page_ = 0, small_used_ = 0;  // the page small allocations are carved from
};

}  // namespace kir::record
