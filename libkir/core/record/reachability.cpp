// The reachability walk (kir/record/reachability.hpp).
#include "kir/record/reachability.hpp"

#include <algorithm>
#include <cstring>
#include <deque>

namespace kir::record {

namespace {

/// Index of the range holding `address` in `order` (indices sorted by
/// address), or -1.
long find_range(const std::vector<MemoryRange>& ranges, const std::vector<size_t>& order, uint64_t address) {
  auto after = std::upper_bound(order.begin(), order.end(), address,
                                [&](uint64_t a, size_t i) { return a < ranges[i].address; });
  if (after == order.begin()) return -1;
  size_t i = *(after - 1);
  return address - ranges[i].address < ranges[i].size ? long(i) : -1;
}

}  // namespace

std::vector<size_t> reachable_ranges(const std::vector<MemoryRange>& ranges, const std::vector<uint64_t>& roots,
                                     const std::function<ByteView(size_t)>& contents) {
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a].address < ranges[b].address; });
  std::vector<bool> seen(ranges.size(), false);
  std::deque<size_t> pending;
  auto visit = [&](uint64_t value) {
    long i = find_range(ranges, order, value);
    if (i >= 0 && !seen[size_t(i)]) {
      seen[size_t(i)] = true;
      pending.push_back(size_t(i));
    }
  };
  for (uint64_t root : roots) visit(root);
  while (!pending.empty()) {
    size_t i = pending.front();
    pending.pop_front();
    ByteView bytes = contents(i);
    for (uint64_t at = 0; at + 8 <= bytes.size(); at += 8) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + at, 8);
      if (word) visit(word);
    }
  }
  std::vector<size_t> found;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) found.push_back(i);
  return found;
}

}  // namespace kir::record
