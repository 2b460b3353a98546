// Allocation-tracker lookup cost (issue 5): kir_hook_find_allocation with N live
// allocations, against a linear scan of the same list (what a tracker without an
// index — Mneme's per-allocation list — pays). Built and run by alloc_tracker.py.
//   alloc_tracker N LOOKUPS THREADS
#include <kir/hooks.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

struct Block {
  uint64_t address, size;
};

double ns_per(std::chrono::steady_clock::time_point start, size_t n) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
}

/// Addresses inside random live allocations (the lookup a client does per argument).
std::vector<uint64_t> probes(const std::vector<Block>& blocks, size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(n);
  for (uint64_t& p : out) {
    const Block& b = blocks[rng() % blocks.size()];
    p = b.address + rng() % b.size;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  size_t live = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  size_t lookups = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000000;
  unsigned threads = argc > 3 ? unsigned(std::atoi(argv[3])) : 2;
  std::vector<Block> blocks(live);
  uint64_t next = 0x7f0000000000;
  std::mt19937_64 rng(1);
  for (Block& b : blocks) {  // device-like: 256-byte aligned, 256 B .. 1 MiB, with gaps
    b = {next, 256 + (rng() % 4096) * 256};
    next += b.size + 256 * (rng() % 4);
  }
  auto start = std::chrono::steady_clock::now();
  for (const Block& b : blocks) kir_hook_track_allocation(b.address, b.size, KIR_ALLOC_DEVICE);
  double track_ns = ns_per(start, live);

  std::vector<uint64_t> p = probes(blocks, lookups, 2);
  size_t found = 0;
  start = std::chrono::steady_clock::now();
  for (uint64_t a : p) {
    kir_hook_allocation out;
    found += kir_hook_find_allocation(a, &out);
  }
  double find_ns = ns_per(start, lookups);

  std::vector<std::thread> pool;
  std::vector<size_t> found_by(threads);
  start = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<uint64_t> mine = probes(blocks, lookups / threads, 10 + t);
      for (uint64_t a : mine) {
        kir_hook_allocation out;
        found_by[t] += kir_hook_find_allocation(a, &out);
      }
    });
  for (std::thread& th : pool) th.join();
  double concurrent_ns = ns_per(start, lookups / threads * threads);

  size_t scans = std::max<size_t>(1, lookups / 1000);  // a linear scan is slow: fewer probes
  size_t found_scan = 0;
  start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < scans; ++i)
    for (const Block& b : blocks)
      if (p[i] >= b.address && p[i] < b.address + b.size) {
        ++found_scan;
        break;
      }
  double scan_ns = ns_per(start, scans);

  start = std::chrono::steady_clock::now();
  for (const Block& b : blocks) kir_hook_untrack_allocation(b.address);
  double untrack_ns = ns_per(start, live);
  if (found != lookups || found_scan != scans) {
    std::fprintf(stderr, "lookup missed: %zu of %zu, scan %zu of %zu\n", found, lookups, found_scan, scans);
    return 1;
  }
  std::printf("%zu %.1f %.1f %.1f %.1f %.1f\n", live, track_ns, find_ns, concurrent_ns, scan_ns, untrack_ns);
  return 0;
}
