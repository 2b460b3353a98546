// The cache's C ABI (kir/cache.h) as the JIT client calls it: store and look up,
// callers compiled with an older (smaller) kir_cache_entry, errors through
// kir_last_error, and the in-memory layer read by several threads while another
// stores (the table grows under them). Run by ctest, under ASan+UBSan in
// tests/native/test_native.py.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <new>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kir/cache.h"

// Every C++ allocation of the process, counted (memory hits must make none).
std::atomic<uint64_t> allocations{0};
void* operator new(size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

int checks = 0, failures = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    ++checks;                                                              \
    if (!(cond)) {                                                         \
      ++failures;                                                          \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)

std::string temp_dir() {
  char t[] = "/tmp/kir-cache-test-XXXXXX";
  if (!mkdtemp(t)) std::abort();
  return t;
}

std::vector<uint8_t> code_for(uint64_t i) {
  std::vector<uint8_t> c(100 + i % 300);
  for (size_t j = 0; j < c.size(); ++j) c[j] = uint8_t(i * 31 + j);
  return c;
}

kir_hash128 key_for(uint64_t i) { return {0x1234567800000000ull + i, i * 0x9E3779B97F4A7C15ull}; }

int store(kir_cache* c, uint64_t i) {
  std::vector<uint8_t> code = code_for(i);
  std::string n = std::to_string(i);
  kir_cache_meta meta[] = {{"producer", "cache_test"}, {"n", n.c_str()}};
  kir_cache_entry e{};
  e.struct_size = sizeof e;
  e.code = code.data();
  e.code_size = code.size();
  e.code_kind = i % 2 ? "ptx" : "cubin";
  e.arch = "sm_90";
  e.meta = meta;
  e.meta_count = 2;
  return kir_cache_store(c, key_for(i), &e);
}

bool matches(const kir_cache_entry& e, uint64_t i) {
  std::vector<uint8_t> code = code_for(i);
  return e.code_size == code.size() && std::memcmp(e.code, code.data(), code.size()) == 0 &&
         std::strcmp(e.code_kind, i % 2 ? "ptx" : "cubin") == 0 && std::strcmp(e.arch, "sm_90") == 0 &&
         e.meta_count == 2 && std::strcmp(e.meta[0].key, "producer") == 0 &&
         std::strcmp(e.meta[1].value, std::to_string(i).c_str()) == 0;
}

void test_roundtrip(const std::string& dir) {
  kir_cache* c = kir_cache_open(dir.c_str(), nullptr);
  CHECK(c != nullptr);
  CHECK(store(c, 1) == 0);
  kir_cache_entry e{};
  e.struct_size = sizeof e;
  CHECK(kir_cache_lookup(c, key_for(1), &e) == 1 && matches(e, 1));
  CHECK(kir_cache_lookup(c, key_for(2), &e) == 0);
  kir_cache_close(c);

  // Another handle reads the file, then holds it: the same pointers every time.
  c = kir_cache_open(dir.c_str(), nullptr);
  kir_cache_entry a{}, b{};
  a.struct_size = b.struct_size = sizeof a;
  CHECK(kir_cache_lookup(c, key_for(1), &a) == 1 && matches(a, 1));  // from disk
  CHECK(kir_cache_lookup(c, key_for(1), &b) == 1 && b.code == a.code && b.meta == a.meta);
  uint64_t before = allocations.load();
  for (int i = 0; i < 1000; ++i) CHECK(kir_cache_lookup(c, key_for(1), &b) == 1 && b.code == a.code);
  CHECK(allocations.load() == before);  // a memory hit allocates nothing
  // An older caller whose struct ends after code_size gets no more than that.
  struct old_entry {
    uint32_t struct_size;
    const void* code;
    size_t code_size;
  } old{};
  old.struct_size = sizeof old;
  CHECK(kir_cache_lookup(c, key_for(1), reinterpret_cast<kir_cache_entry*>(&old)) == 1);
  CHECK(old.struct_size == sizeof old && old.code == a.code && old.code_size == a.code_size);
  kir_cache_stats s{};
  s.struct_size = sizeof s;
  CHECK(kir_cache_get_stats(c, &s) == 0);
  CHECK(s.hits == 1003 && s.memory_hits == 1002 && s.misses == 0 && s.errors == 0 && s.stores == 0);
  CHECK(kir_cache_remove(c, key_for(1)) == 1 && kir_cache_remove(c, key_for(1)) == 0);
  CHECK(kir_cache_lookup(c, key_for(1), &a) == 1);  // held in memory until close
  kir_cache_close(c);
}

void test_errors(const std::string& dir) {
  CHECK(kir_cache_open(nullptr, nullptr) == nullptr && std::strstr(kir_last_error(), "directory is NULL"));
  kir_cache_options o{};
  o.struct_size = sizeof o;
  o.flags = KIR_CACHE_OPEN_EXISTING;
  std::string missing = dir + "/missing";
  CHECK(kir_cache_open(missing.c_str(), &o) == nullptr && std::strstr(kir_last_error(), "No such file"));
  kir_cache_entry e{};
  e.struct_size = sizeof e;
  CHECK(kir_cache_lookup(nullptr, key_for(1), &e) == -1 && std::strstr(kir_last_error(), "handle is NULL"));
  kir_cache* c = kir_cache_open(dir.c_str(), &o);
  CHECK(c != nullptr);
  CHECK(kir_cache_lookup(c, key_for(1), nullptr) == -1 && std::strstr(kir_last_error(), "out is NULL"));
  e.code_kind = "elf";
  e.arch = "sm_90";
  CHECK(kir_cache_store(c, key_for(1), &e) == -1 && std::strstr(kir_last_error(), "code kind 'elf'"));
  e.code_kind = nullptr;
  CHECK(kir_cache_store(c, key_for(1), &e) == -1 && std::strstr(kir_last_error(), "code_kind or arch is NULL"));
  kir_cache_close(c);
  kir_cache_close(nullptr);
}

/// Readers probe the table while a writer stores 500 entries (the table grows
/// from 64 slots several times): every answer is a miss or the right entry.
void test_threads(const std::string& dir) {
  kir_cache* c = kir_cache_open(dir.c_str(), nullptr);
  const uint64_t n = 500;
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::atomic<uint64_t> hits{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      while (!done.load()) {
        for (uint64_t i = 100 + t; i < 100 + n; i += 7) {
          kir_cache_entry e{};
          e.struct_size = sizeof e;
          int r = kir_cache_lookup(c, key_for(i), &e);
          if (r == 1) {
            hits.fetch_add(1);
            if (!matches(e, i)) wrong.fetch_add(1);
          } else if (r != 0) {
            wrong.fetch_add(1);
          }
        }
      }
    });
  for (uint64_t i = 100; i < 100 + n; ++i) CHECK(store(c, i) == 0);
  done.store(true);
  for (std::thread& t : readers) t.join();
  CHECK(wrong.load() == 0);
  CHECK(hits.load() > 0);
  for (uint64_t i = 100; i < 100 + n; ++i) {
    kir_cache_entry e{};
    e.struct_size = sizeof e;
    CHECK(kir_cache_lookup(c, key_for(i), &e) == 1 && matches(e, i));
  }
  kir_cache_close(c);
}

}  // namespace

// Who may write the cache (docs/cache.md): a directory others may write is refused
// through the C ABI as the JIT client meets it (-1, the reason in kir_last_error),
// and a caller compiled before kir_cache_options.group still opens a private cache.
void test_refused(const std::string& dir) {
  kir_cache_options old{};
  old.struct_size = offsetof(kir_cache_options, group);  // the struct without `group`
  kir_cache* c = kir_cache_open(dir.c_str(), &old);
  CHECK(c != nullptr && store(c, 7) == 0);
  struct stat st;
  CHECK(stat(dir.c_str(), &st) == 0 && (st.st_mode & 07777) == 0700);
  kir_cache_close(c);
  CHECK(chmod(dir.c_str(), 0777) == 0);
  c = kir_cache_open(dir.c_str(), nullptr);
  kir_cache_entry e{};
  e.struct_size = sizeof e;
  CHECK(c != nullptr && kir_cache_lookup(c, key_for(7), &e) == -1 &&
        std::strstr(kir_last_error(), "refused: writable by every user (mode 0777"));
  kir_cache_stats s{};
  s.struct_size = sizeof s;
  CHECK(kir_cache_get_stats(c, &s) == 0 && s.errors == 1 && s.misses == 1 && s.hits == 0);
  CHECK(store(c, 8) == -1 && std::strstr(kir_last_error(), "refused"));
  kir_cache_close(c);
  CHECK(chmod(dir.c_str(), 0700) == 0);
}

int main() {
  std::string dir = temp_dir();
  CHECK(store(nullptr, 1) == -1 && allocations.load() > 0);  // the counter counts
  test_roundtrip(dir + "/a");
  test_errors(dir);
  test_threads(dir + "/b");
  test_refused(dir + "/c");
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
