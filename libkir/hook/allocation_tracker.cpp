// The allocation tracker (allocation_tracker.hpp).
#include "allocation_tracker.hpp"

namespace kir::hook {

namespace {

/// The allocation of `map` (by start address) holding `address`, or nullptr.
template <class Map>
auto* holding(Map& map, uint64_t address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return static_cast<decltype(&it->second)>(nullptr);
  --it;
  return address - it->second.address < it->second.size ? &it->second : nullptr;
}

}  // namespace

kir_hook_allocation AllocationTracker::add(uint64_t address, uint64_t size, int kind) {
  kir_hook_allocation a{address, size, kind, nullptr};
  std::unique_lock<std::shared_mutex> lock(mutex_);
  allocations_[address] = a;
  return a;
}

bool AllocationTracker::remove(uint64_t address, kir_hook_allocation& out) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = allocations_.find(address);
  if (it == allocations_.end()) return false;
  out = it->second;
  allocations_.erase(it);
  annotations_.erase(address);
  return true;
}

bool AllocationTracker::annotate(uint64_t address, const kir_record_annotation& annotation) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  const kir_hook_allocation* a = holding(allocations_, address);
  if (!a) return false;
  Annotation& stored = annotations_[a->address];
  stored.value = annotation;
  stored.value.struct_size = sizeof(kir_record_annotation);
  stored.tag = annotation.tag ? annotation.tag : "";
  stored.value.tag = nullptr;
  return true;
}

bool AllocationTracker::annotation(uint64_t start, kir_record_annotation& out) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = annotations_.find(start);
  if (it == annotations_.end()) return false;
  out = it->second.value;
  out.tag = it->second.tag.c_str();
  return true;
}

bool AllocationTracker::find(uint64_t address, kir_hook_allocation& out) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  const kir_hook_allocation* a = holding(allocations_, address);
  if (a) out = *a;
  return a != nullptr;
}

bool AllocationTracker::tag(uint64_t address, void* tag) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  kir_hook_allocation* a = holding(allocations_, address);
  if (a) a->tag = tag;
  return a != nullptr;
}

void AllocationTracker::for_each(void (*visit)(void*, const kir_hook_allocation*), void* user) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  for (const auto& [address, a] : allocations_) visit(user, &a);
}

size_t AllocationTracker::live() const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return allocations_.size();
}

int AllocationTracker::set_allocator(const kir_hook_allocator* allocator) {
  if (!allocator || allocator->struct_size < sizeof(kir_hook_allocator) || !allocator->allocate || !allocator->release)
    return -1;
  int none = kNone;
  if (!allocator_state_.compare_exchange_strong(none, kInstalling, std::memory_order_acq_rel)) return -1;
  allocator_ = *allocator;
  allocator_state_.store(kInstalled, std::memory_order_release);
  return 0;
}

bool AllocationTracker::serve(uint64_t size, const void* stream, uint64_t& address) {
  if (allocator_state_.load(std::memory_order_acquire) != kInstalled || size == 0) return false;
  return allocator_.allocate(allocator_.user, size, stream, &address) == 0;
}

bool AllocationTracker::release(uint64_t address, const void* stream) {
  if (allocator_state_.load(std::memory_order_acquire) != kInstalled || address == 0) return false;
  return allocator_.release(allocator_.user, address, stream) == 1;
}

}  // namespace kir::hook
