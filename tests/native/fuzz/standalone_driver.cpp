// A small mutation fuzzer for compilers without libFuzzer (gcc): loads seed
// files, mutates them (bit flips, interesting integers at random offsets,
// truncation, duplication) and feeds each mutant to LLVMFuzzerTestOneInput.
//
//   kir_fuzz_parsers [-seconds=N] [-seed=N] SEED_FILE...
//
// Runs for a bounded time and exits 0; a sanitizer report aborts the run.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

void put(Bytes& b, size_t pos, uint64_t value, size_t width) {
  for (size_t i = 0; i < width && pos + i < b.size(); ++i) b[pos + i] = uint8_t(value >> (8 * i));
}

Bytes mutate(const Bytes& seed, std::mt19937_64& rng) {
  static const uint64_t interesting[] = {0, 1, 7, 8, 16, 64, 0x7f, 0x80, 0xff, 0xffff,
                                         0x7fffffff, 0xffffffff, 0x100000000ull,
                                         0x7fffffffffffffffull, ~0ull, 0xBA55ED50, 0x466243B1};
  Bytes b = seed;
  if (b.empty()) b.push_back(0);
  int edits = 1 + int(rng() % 8);
  for (int i = 0; i < edits; ++i) {
    size_t pos = rng() % b.size();
    switch (rng() % 6) {
      case 0: b[pos] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: b[pos] = uint8_t(rng()); break;
      case 2: put(b, pos, interesting[rng() % std::size(interesting)], 4); break;
      case 3: put(b, pos, interesting[rng() % std::size(interesting)], 8); break;
      case 4: b.resize(pos + 1); break;
      default: {
        size_t len = std::min<size_t>(b.size() - pos, 1 + rng() % 64);
        b.insert(b.begin() + long(rng() % b.size()), b.begin() + long(pos),
                 b.begin() + long(pos + len));
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<Bytes> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("-seconds=", 0) == 0) seconds = std::stod(arg.substr(9));
    else if (arg.rfind("-seed=", 0) == 0) seed = std::stoull(arg.substr(6));
    else {
      std::ifstream in(arg, std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) seeds.push_back(Bytes(64, 0));
  std::mt19937_64 rng(seed);
  auto start = std::chrono::steady_clock::now();
  uint64_t runs = 0;
  for (const Bytes& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size()), ++runs;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    Bytes m = mutate(seeds[rng() % seeds.size()], rng);
    LLVMFuzzerTestOneInput(m.data(), m.size());
    ++runs;
  }
  const char* name = std::strrchr(argv[0], '/');
  std::printf("%s: %llu runs in %.1f s, no failures\n", name ? name + 1 : argv[0],
              static_cast<unsigned long long>(runs), seconds);
  return 0;
}
