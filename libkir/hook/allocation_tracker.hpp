// The live device and host allocations the layer has seen (by start address),
// and a client's allocator that may serve device allocations in place of the
// runtime. One reader/writer lock for the allocations; the allocator is
// installed once and read without a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "kir/hooks.h"
#include "kir/record.h"

namespace kir::hook {

class AllocationTracker {
 public:
  /// Track `size` bytes of `kind` at `address`; the tracked allocation.
  kir_hook_allocation add(uint64_t address, uint64_t size, int kind);
  /// Stop tracking the allocation starting at `address`: true and `out` when there was one.
  bool remove(uint64_t address, kir_hook_allocation& out);
  bool find(uint64_t address, kir_hook_allocation& out) const;
  bool tag(uint64_t address, void* tag);
  /// The app's annotation (kir/record.h) of the allocation holding `address`
  /// (replacing an earlier one): false when none holds it. Dropped with the allocation.
  bool annotate(uint64_t address, const kir_record_annotation& annotation);
  /// The annotation of the allocation starting at `start`: false when it has none.
  /// `out.tag` stays valid until the allocation is freed or annotated again.
  bool annotation(uint64_t start, kir_record_annotation& out) const;
  void for_each(void (*visit)(void*, const kir_hook_allocation*), void* user) const;
  size_t live() const;

  /// A client's allocator (one per process): 0, or -1 when it is incomplete or one is installed.
  int set_allocator(const kir_hook_allocator* allocator);
  /// Serve a device allocation from the client allocator: true and `address` when it did (not tracked yet).
  bool serve(uint64_t size, const void* stream, uint64_t& address);
  /// Give `address` back to the client allocator: true when it had served it (still tracked).
  bool release(uint64_t address, const void* stream);

 private:
  mutable std::shared_mutex mutex_;
  std::map<uint64_t, kir_hook_allocation> allocations_;  // by start address
  struct Annotation {
    kir_record_annotation value;
    std::string tag;
  };
  std::map<uint64_t, Annotation> annotations_;  // by the allocation's start address
  enum : int { kNone, kInstalling, kInstalled };
  std::atomic<int> allocator_state_{kNone};
  kir_hook_allocator allocator_{};
};

}  // namespace kir::hook
