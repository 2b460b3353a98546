// Dynamic-hash latency: nanoseconds per launch key, for several shapes of key.
// Built and run by benchmarks/hashing.py against the installed kir package.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kir/hash/hash.hpp"

namespace {

volatile uint64_t sink;

template <class Build>
double ns_per_key(Build&& build, int iterations) {
  for (int i = 0; i < iterations / 10; ++i) sink = build(i).low;  // warm up
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) sink = build(i).high;
  std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

}  // namespace

int main() {
  const kir::Hash128 s = kir::static_hash("_Z4axpyfPKfPfi", "ir", {});
  const int n = 5'000'000;
  std::vector<uint8_t> object(1024, 3);
  const kir::DynamicHash prefix(s, "sm_90");
  struct Shape {
    const char* name;
    double ns;
  } shapes[] = {
      {"static + arch", ns_per_key([&](int) { return kir::DynamicHash(s, "sm_90").finish(); }, n)},
      {"static + arch + grid/block + 4 scalar args (the issue's target shape)",
       ns_per_key([&](int i) {
         return kir::DynamicHash(s, "sm_90")
             .arg(1, kir::ArgType::f32, 2.0f)
             .arg(2, kir::ArgType::i32, i)
             .arg(3, kir::ArgType::u64, uint64_t(1) << 40)
             .arg(4, kir::ArgType::f64, 0.5)
             .grid(uint32_t(i), 1, 1)
             .block(256, 1, 1)
             .finish();
       }, n)},
      {"the same, from a per-kernel prefix (DynamicHash::extend)",
       ns_per_key([&](int i) {
         return kir::DynamicHash::extend(prefix)
             .arg(1, kir::ArgType::f32, 2.0f)
             .arg(2, kir::ArgType::i32, i)
             .arg(3, kir::ArgType::u64, uint64_t(1) << 40)
             .arg(4, kir::ArgType::f64, 0.5)
             .grid(uint32_t(i), 1, 1)
             .block(256, 1, 1)
             .finish();
       }, n)},
      {"+ 8 args, bounds, 2 config entries",
       ns_per_key([&](int i) {
         kir::DynamicHash h(s, "sm_90");
         for (uint32_t a = 1; a <= 8; ++a) h.arg(a, kir::ArgType::i32, i);
         return h.grid(1, 1, 1).block(128, 1, 1).bounds(256, 2).config("opt", "3")
             .config("pipeline", "default<O3>").finish();
       }, n)},
      {"1 KiB by-value argument (streams past the inline buffer)",
       ns_per_key([&](int i) {
         object[0] = uint8_t(i);
         return kir::DynamicHash(s, "sm_90").arg(1, kir::ArgType::bytes, object.data(), object.size())
             .finish();
       }, n / 5)},
  };
  for (const Shape& shape : shapes) std::printf("%.1f\t%s\n", shape.ns, shape.name);
  return 0;
}
