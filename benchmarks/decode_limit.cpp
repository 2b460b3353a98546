// The decompression limit of `kir inspect --kernels` (issue 15), in C++ and in one
// process: for each thread count N, on one library,
//
//   decompress  every image decoded (kir::decode_image: zstd / LZ4 into a per-thread
//               buffer) and nothing else, N threads taking images from one counter
//   decode      Binary::device_code_of with N threads: the same decompression, plus
//               the ELF / .nv.info / PTX decoding, demangling and the DeviceCode
//               built (what `kir inspect --kernels` asks of the core)
//
// Each is timed on a freshly opened Binary (the file's pages stay in the page
// cache; their mapping is new), alternating, `repeat` times; the medians and
// decode / decompress are printed as one tab-separated line per N.
//
// Built and run by benchmarks/inspect_profile.py against the installed kir package.
//
//   decode_limit LIB THREADS[,THREADS...] [REPEAT]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kir/binary.hpp"
#include "kir/support/compression.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

kir::Binary open_or_exit(const char* path) {
  kir::Expected<kir::Binary> b = kir::Binary::open(path);
  if (!b) {
    std::fprintf(stderr, "decode_limit: %s\n", b.error().message().c_str());
    std::exit(2);
  }
  return std::move(*b);
}

/// Every image decoded (decompressed) on `threads` threads; returns the seconds.
double decompress(const char* path, unsigned threads, uint64_t& bytes) {
  kir::Binary b = open_or_exit(path);
  std::vector<const kir::Image*> images;
  for (const kir::ContainerSite& c : b.containers())
    for (const kir::Image& i : c.images) images.push_back(&i);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0}, failed{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      kir::Scratch scratch;
      uint64_t mine = 0;
      for (size_t i; (i = next++) < images.size();) {
        kir::Expected<kir::ByteView> out = kir::decode_image(*images[i], scratch);
        if (out) mine += out->size();
        else ++failed;
      }
      total += mine;
    });
  for (std::thread& t : pool) t.join();
  double s = seconds_since(start);
  bytes = total;
  if (failed) std::fprintf(stderr, "decode_limit: %llu images could not be decoded\n", (unsigned long long)failed);
  return s;
}

/// Binary::device_code_of every image on `threads` threads; returns the seconds.
double decode(const char* path, unsigned threads, size_t& kernels) {
  kir::Binary b = open_or_exit(path);
  std::vector<kir::Binary::ImageRef> refs;
  for (uint32_t c = 0; c < b.containers().size(); ++c)
    for (uint32_t i = 0; i < b.containers()[c].images.size(); ++i) refs.emplace_back(c, i);
  auto start = std::chrono::steady_clock::now();
  std::vector<kir::Expected<kir::DeviceCode>> codes = b.device_code_of(refs, threads);
  double s = seconds_since(start);
  kernels = 0;
  for (const auto& code : codes)
    if (code) kernels += code->kernels.size();
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: decode_limit LIB THREADS[,THREADS...] [REPEAT]\n");
    return 2;
  }
  int repeat = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<unsigned> counts;
  for (std::string list = argv[2]; !list.empty();) {
    size_t comma = list.find(',');
    counts.push_back(unsigned(std::stoul(list.substr(0, comma))));
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  std::printf("threads\tdecompress_s\tdecode_s\tdecode_over_decompress\tdecompressed_bytes\tkernels\n");
  for (unsigned n : counts) {
    std::vector<double> d, k;
    uint64_t bytes = 0;
    size_t kernels = 0;
    for (int r = 0; r < repeat; ++r) {
      d.push_back(decompress(argv[1], n, bytes));
      k.push_back(decode(argv[1], n, kernels));
    }
    std::printf("%u\t%.4f\t%.4f\t%.3f\t%llu\t%zu\n", n, median(d), median(k), median(k) / median(d),
                (unsigned long long)bytes, kernels);
    std::fflush(stdout);
  }
  return 0;
}
