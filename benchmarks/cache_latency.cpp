// Kernel-object cache latency (kir/cache.h), the JIT client's view:
//   cache_latency CODE_FILE DIR
// 1. memory hit: kir_cache_lookup of a key already held (the launch path's
//    repeated lookup), 20 M lookups cycling over 64 keys, ns per lookup;
//    also the C++ probe (Cache::find_in_memory) alone;
// 2. cold disk hit: a fresh handle's first lookup of a key (open, fstat, read,
//    checksum over the whole file, parse, touch, publish), page cache warm;
// 3. miss (no file), and store (temporary, write, fsync, rename, directory fsync).
// Prints "name<TAB>value<TAB>unit" lines; benchmarks/cache.py builds and runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "kir/cache.h"
#include "kir/cache.hpp"

namespace {

using Clock = std::chrono::steady_clock;
volatile size_t sink;

double ns_since(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

kir_hash128 key(uint64_t i) { return {0xC0FFEE0000000000ull | i, i * 0x9E3779B97F4A7C15ull}; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cache_latency CODE_FILE DIR\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<uint8_t> code((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string dir = argv[2];
  kir_cache* c = kir_cache_open(dir.c_str(), nullptr);
  if (!c) {
    std::fprintf(stderr, "%s\n", kir_last_error());
    return 1;
  }
  kir_cache_meta meta[] = {{"producer", "benchmarks/cache_latency"}, {"kernel", "_Z4axpydPKdPdi"},
                           {"key.arg.1", "f64:2.5"}, {"compile.opt", "O3"}, {"resource.registers", "32"}};
  kir_cache_entry e{sizeof(kir_cache_entry), code.data(), code.size(), "cubin", "sm_90", meta, 5};
  const int keys = 64;
  std::vector<double> store_ns;
  for (int i = 0; i < keys; ++i) {
    auto t = Clock::now();
    if (kir_cache_store(c, key(i), &e) != 0) return std::fprintf(stderr, "%s\n", kir_last_error()), 1;
    store_ns.push_back(ns_since(t));
  }
  kir_cache_close(c);

  // 2. Cold disk hits: each key's first lookup in a fresh handle.
  std::vector<double> disk_ns, miss_ns;
  for (int round = 0; round < 5; ++round) {
    kir_cache* fresh = kir_cache_open(dir.c_str(), nullptr);
    for (int i = 0; i < keys; ++i) {
      kir_cache_entry out{};
      out.struct_size = sizeof out;
      auto t = Clock::now();
      int r = kir_cache_lookup(fresh, key(i), &out);
      disk_ns.push_back(ns_since(t));
      if (r != 1) return std::fprintf(stderr, "disk lookup %d: %d %s\n", i, r, kir_last_error()), 1;
      t = Clock::now();
      r = kir_cache_lookup(fresh, key(1000 + i), &out);
      miss_ns.push_back(ns_since(t));
      if (r != 0) return 1;
    }
    kir_cache_close(fresh);
  }

  // 1. Memory hits through the C ABI, then the C++ probe alone.
  c = kir_cache_open(dir.c_str(), nullptr);
  kir_cache_entry out{};
  out.struct_size = sizeof out;
  for (int i = 0; i < keys; ++i) kir_cache_lookup(c, key(i), &out);  // now held
  const int n = 20'000'000;
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) {
      kir_cache_lookup(c, key(i & (keys - 1)), &out);
      sink = out.code_size;
    }
    runs.push_back(ns_since(t) / n);
  }
  // The same from several threads at once (they share the handle's hit counter).
  const unsigned threads = std::max(2u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<double> per_thread(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      kir_cache_entry o{};
      o.struct_size = sizeof o;
      auto start = Clock::now();
      for (int i = 0; i < n; ++i) kir_cache_lookup(c, key((i + t) & (keys - 1)), &o);
      per_thread[t] = ns_since(start) / n;
    });
  for (std::thread& t : pool) t.join();
  kir_cache_stats s{};
  s.struct_size = sizeof s;
  kir_cache_get_stats(c, &s);
  if (s.memory_hits != uint64_t(5 + threads) * n) return std::fprintf(stderr, "not all memory hits\n"), 1;
  kir_cache_close(c);
  auto cpp = kir::cache::Cache::open(dir, {});
  for (int i = 0; i < keys; ++i) (void)(*cpp)->lookup({key(i).high, key(i).low});
  std::vector<double> probe;
  for (int r = 0; r < 5; ++r) {
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) sink = (*cpp)->find_in_memory({key(i & (keys - 1)).high, key(i & (keys - 1)).low})->file_size;
    probe.push_back(ns_since(t) / n);
  }

  std::printf("memory hit, kir_cache_lookup (64 keys, 20 M lookups, median of 5)\t%.1f\tns\n", median(runs));
  std::printf("memory hit, kir_cache_lookup from %u threads at once (per lookup, slowest thread)\t%.1f\tns\n",
              threads, *std::max_element(per_thread.begin(), per_thread.end()));
  std::printf("memory hit, Cache::find_in_memory alone\t%.1f\tns\n", median(probe));
  std::printf("cold disk hit, first lookup in a fresh handle (%zu-byte code, median of %zu)\t%.1f\tus\n", code.size(),
              disk_ns.size(), median(disk_ns) / 1000);
  std::printf("miss, no entry file (median of %zu)\t%.1f\tus\n", miss_ns.size(), median(miss_ns) / 1000);
  std::printf("store: write, fsync, rename, directory fsync (median of %zu)\t%.1f\tus\n", store_ns.size(),
              median(store_ns) / 1000);
  return 0;
}
