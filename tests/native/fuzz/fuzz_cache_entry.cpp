// Fuzz target for the cache entry parser (kir/cache.hpp parse_entry) and the
// cache's read path, built the same two ways as fuzz_parsers.cpp (libFuzzer
// with clang, or standalone_driver.cpp), under ASan and UBSan either way.
//
// For every input:
//  1. parse_entry on the bytes as they are; an entry that parses must encode
//     back to exactly the same bytes (the layout has one spelling per entry).
//  2. The same with the last 16 bytes replaced by the right checksum, so that
//     mutations reach the fields behind it (sizes, metadata, UTF-8, padding),
//     which a random input's checksum would otherwise always hide.
//  3. Every 8th input: that file as entry `key` of a cache directory, looked
//     up through kir::cache::Cache (open, fstat, bounded read, parse, removal
//     of a damaged file) and listed as `kir cache verify` does.
// The only acceptable outcomes are a value or an Error.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kir/cache.hpp"

namespace {

void parse_and_roundtrip(const uint8_t* data, size_t size) {
  kir::Expected<kir::cache::EntryView> e = kir::cache::parse_entry(kir::ByteView(data, size));
  if (!e) {
    const kir::Error& error = e.error();  // every failure says what and where (and what kind)
    if (error.message().empty() || !error.offset() || *error.offset() > size ||
        error.code() == kir::ErrorCode::none || error.code() == kir::ErrorCode::internal)
      __builtin_trap();
    return;
  }
  kir::Expected<std::vector<uint8_t>> again = kir::cache::encode_entry(*e);
  if (!again || again->size() != size || std::memcmp(again->data(), data, size) != 0) __builtin_trap();
  kir::cache::parse_entry(kir::ByteView(data, size), &e->key).ok() ? void() : __builtin_trap();
}

/// A private cache directory, removed at exit.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/kir-fuzz-cache-XXXXXX";
    if (!mkdtemp(t)) std::abort();
    path = t;
  }
  ~TempDir() {
    rmdir((path + "/01").c_str());
    rmdir(path.c_str());
  }
};

const std::string& cache_dir() {
  static const TempDir dir;
  return dir.path;
}

void through_the_cache(const uint8_t* data, size_t size) {
  const kir::Hash128 key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  std::string shard = cache_dir() + "/01";
  mkdir(shard.c_str(), 0700);
  std::string path = cache_dir() + "/" + kir::cache::entry_relative_path(key);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return;
  bool ok = write(fd, data, size) == static_cast<ssize_t>(size);
  close(fd);
  if (!ok) return;
  auto cache = kir::cache::Cache::open(cache_dir(), kir::cache::Options{});
  if (!cache) __builtin_trap();
  (void)(*cache)->list(true);
  kir::Expected<const kir::cache::Held*> h = (*cache)->lookup(key);
  if (!h) __builtin_trap();  // a damaged file is a miss, never an error
  if (*h && ((*h)->entry.code_size > size || (*h)->key != key)) __builtin_trap();
  unlink(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parse_and_roundtrip(data, size);
  if (size >= kir::cache::kChecksumSize) {
    std::vector<uint8_t> fixed(data, data + size);
    kir::Hash128 h = kir::xxh3_128(kir::ByteView(fixed.data(), size - kir::cache::kChecksumSize));
    for (int i = 0; i < 8; ++i) {
      fixed[size - 16 + i] = uint8_t(h.high >> (56 - 8 * i));
      fixed[size - 8 + i] = uint8_t(h.low >> (56 - 8 * i));
    }
    parse_and_roundtrip(fixed.data(), size);
    static unsigned n = 0;
    if (n++ % 8 == 0) through_the_cache(fixed.data(), size);
  }
  return 0;
}
