// The recorder's VA-stable allocator (va_allocator.hpp).
#include "va_allocator.hpp"

#include "kir/support/error.hpp"

namespace kir::record {

namespace {

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

bool VaAllocator::ready() {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserve();
}

bool VaAllocator::reserve() {
  if (tried_) return reserved_;
  tried_ = true;
  device_ = driver_.ensure_context(&why_);
  if (device_ < 0) return false;
  size_t granularity = 0;
  if (driver_.granularity(device_, &granularity) == 0 && granularity) granularity_ = granularity;
  size_ = round_up(size_, granularity_);
  uint64_t got = 0;
  int r = driver_.reserve(&got, size_, granularity_, base_);
  if (r != 0) {
    why_ = std::string(driver_.reserve_call()) + "(" + hex(size_) + " bytes at " + hex(base_) +
           ") failed: " + driver_.error_name(r);
    return false;
  }
  if (got != base_) {
    driver_.address_free(got, size_);
    why_ = "the driver placed the range at " + hex(got) + ", not at " + hex(base_) + " (address in use?)";
    return false;
  }
  free_[base_] = size_;
  reserved_ = true;
  return true;
}

uint64_t VaAllocator::take_range(uint64_t size) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    uint64_t address = it->first, left = it->second - size;
    free_.erase(it);
    if (left) free_[address + size] = left;
    return address;
  }
  return 0;
}

void VaAllocator::return_range(uint64_t address, uint64_t size) {
  auto next = free_.lower_bound(address);
  if (next != free_.end() && address + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += size;
      return;
    }
  }
  free_[address] = size;
}

VaAllocator::Mapping* VaAllocator::map_new(uint64_t size) {
  size = round_up(size, granularity_);
  uint64_t address = take_range(size);
  if (!address) {
    why_ = "the reserved range (" + hex(size_) + " bytes at " + hex(base_) + ") has no room for " + hex(size) +
           " bytes more";
    return nullptr;
  }
  Mapping m;
  m.address = address, m.size = size;
  int r = driver_.create(&m.handle, size, device_);
  if (r == 0 && (r = driver_.map(address, size, m.handle)) != 0) driver_.release(m.handle);
  if (r == 0 && (r = driver_.set_access(address, size, device_)) != 0) {
    driver_.unmap(address, size);
    driver_.release(m.handle);
  }
  if (r != 0) {
    return_range(address, size);
    why_ = "mapping " + hex(size) + " bytes at " + hex(address) + " failed: " + driver_.error_name(r);
    return nullptr;
  }
  return &(mappings_[address] = m);
}

void VaAllocator::unmap(Mapping& m) {
  driver_.unmap(m.address, m.size);
  driver_.release(m.handle);
  return_range(m.address, m.size);
  mappings_.erase(m.address);
}

uint64_t VaAllocator::allocate(uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!reserve()) return 0;
  size = round_up(size ? size : 1, kAlignment);
  if (size > kSmall) {
    Mapping* m = map_new(size);
    if (!m) return 0;
    m->allocations = 1;
    allocations_[m->address] = m->address;
    return m->address;
  }
  auto page = mappings_.find(small_page_);
  if (page == mappings_.end() || small_used_ + size > page->second.size) {
    if (page != mappings_.end() && page->second.allocations == 0) unmap(page->second);
    Mapping* m = map_new(granularity_);
    if (!m) return 0;
    small_page_ = m->address, small_used_ = 0;
    page = mappings_.find(small_page_);
  }
  uint64_t address = small_page_ + small_used_;
  small_used_ += size;
  ++page->second.allocations;
  allocations_[address] = small_page_;
  return address;
}

bool VaAllocator::release(uint64_t address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto a = allocations_.find(address);
  if (a == allocations_.end()) return false;
  Mapping& m = mappings_.at(a->second);
  allocations_.erase(a);
  if (--m.allocations == 0 && m.address != small_page_) unmap(m);
  return true;
}

}  // namespace kir::record
