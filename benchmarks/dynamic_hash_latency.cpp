// Per-launch hash latency: nanoseconds per JIT key or launch identity, for
// several shapes of key (DynamicHash builds JIT keys unless told otherwise).
// Built and run by benchmarks/hashing.py against the installed kir package.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cstring>

#include "kir/hash/hash.hpp"
#include "kir/kir.h"

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
  // kir_jit_key as a JIT client calls it at a launch: axpy(double a, double* c, int n)
  // with a, n and c's 8 elements (read through read_memory) runtime constants, the
  // block specialized, shared memory, one CONFIG item, from a per-kernel prefix.
  double a = 2.5, coefficients[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  double* c = coefficients;
  int32_t count = 8;
  void* args[] = {&a, &c, &count};
  const uint32_t sizes[] = {8, 8, 4};
  const kir_jit_arg jit_args[] = {{1, KIR_JIT_SCALAR, KIR_ARG_F64, 0, 0, 0, 0},
                                  {2, KIR_JIT_ARRAY, KIR_ARG_F64, 0, 0, 8, 0},
                                  {3, KIR_JIT_SCALAR, KIR_ARG_I32, 0, 0, 0, 0}};
  const kir_config_item config[] = {{"opt-level", "3", 1}};
  kir_dynamic_hash jit_prefix;
  kir_dynamic_hash_begin(&jit_prefix, {s.high, s.low}, "sm_90");
  kir_jit_key_input in{};
  in.struct_size = sizeof in;
  in.args = args, in.param_sizes = sizes, in.param_count = 3;
  in.jit_args = jit_args, in.jit_arg_count = 3;
  in.block[0] = 256, in.block[1] = in.block[2] = 1;
  in.specialize_block = 1;
  in.shared_bytes = 1024;
  in.config = config, in.config_count = 1;
  in.read_memory = [](void*, uint64_t address, void* out, size_t size) {
    std::memcpy(out, reinterpret_cast<const void*>(uintptr_t(address)), size);  // host memory here
    return 0;
  };
  in.prefix = &jit_prefix;
  const uint32_t grid3[3] = {4, 1, 1}, block3[3] = {256, 1, 1};
  float f = 2.0f;
  uint64_t x = 1ull << 40, y = 1ull << 41;
  void* launch_args[] = {&f, &x, &y, &count};
  const uint32_t launch_sizes[] = {4, 8, 8, 4};
  Shape c_api[] = {
      {"kir_jit_key: 2 scalars + an 8-element f64 array via read_memory, block, shared, 1 config, from a prefix",
       ns_per_key([&](int i) {
         a = double(i);
         kir_hash128 key;
         kir_jit_key(&in, &key);
         return kir::Hash128{key.high, key.low};
       }, n)},
      {"kir_launch_identity: 4 arguments, grid, block, shared",
       ns_per_key([&](int i) {
         x = uint64_t(i);
         kir_hash128 h = kir_launch_identity({s.high, s.low}, "sm_90", launch_args, launch_sizes, 4, grid3, block3, 0);
         return kir::Hash128{h.high, h.low};
       }, n)},
  };
  for (const Shape& shape : shapes) std::printf("%.1f\t%s\n", shape.ns, shape.name);
  for (const Shape& shape : c_api) std::printf("%.1f\t%s\n", shape.ns, shape.name);
  return 0;
}
