// The cache's C ABI (kir/cache.h) over kir::cache::Cache.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "kir/cache.h"
#include "kir/cache.hpp"

namespace kir::detail {
int set_last_error(const kir::Error& error);  // core/c_api.cpp
int set_last_error(const std::string& message);
}  // namespace kir::detail

// Frozen layouts (docs/abi.md): appended fields stay where they are.
static_assert(offsetof(kir_cache_options, max_bytes) == 8 && offsetof(kir_cache_options, flags) == 16,
              "kir_cache_options moved");
static_assert(offsetof(kir_cache_options, group) == 24, "kir_cache_options: cache ABI 2's group moved");
static_assert(offsetof(kir_cache_entry, image_kind) == 56, "kir_cache_entry: cache ABI 3's image_kind moved");

using kir::detail::set_last_error;

struct kir_cache {
  std::unique_ptr<kir::cache::Cache> cache;
};

namespace {

kir::Hash128 from_c(kir_hash128 h) { return {h.high, h.low}; }

bool check(const kir_cache* cache, const char* function) {
  if (!cache) return set_last_error(std::string(function) + ": cache handle is NULL"), false;
  return true;
}

}  // namespace

extern "C" {

uint32_t kir_cache_abi_version(void) { return KIR_CACHE_ABI_VERSION; }

kir_cache* kir_cache_open(const char* directory, const kir_cache_options* options) {
  if (!directory) return set_last_error("kir_cache_open: directory is NULL"), nullptr;
  kir::cache::Options o;
  if (options) {
    kir_cache_options in{};
    std::memcpy(&in, options, std::min<size_t>(options->struct_size, sizeof in));
    if (options->struct_size >= offsetof(kir_cache_options, max_bytes) + sizeof(uint64_t)) o.max_bytes = in.max_bytes;
    if (options->struct_size >= offsetof(kir_cache_options, flags) + sizeof(uint32_t))
      o.create = (in.flags & KIR_CACHE_OPEN_EXISTING) == 0;
    if (options->struct_size >= offsetof(kir_cache_options, group) + sizeof(const char*) && in.group)
      o.group = in.group;
  }
  kir::Expected<std::unique_ptr<kir::cache::Cache>> c = kir::cache::Cache::open(directory, o);
  if (!c) return set_last_error(c.error()), nullptr;
  return new kir_cache{std::move(*c)};
}

void kir_cache_close(kir_cache* cache) { delete cache; }

int kir_cache_lookup(kir_cache* cache, kir_hash128 key, kir_cache_entry* out) {
  if (__builtin_expect(!cache || !out, 0))
    return set_last_error(cache ? "kir_cache_lookup: out is NULL" : "kir_cache_lookup: cache handle is NULL");
  const kir::Hash128 k = from_c(key);
  const kir::cache::Held* h = cache->cache->hit_in_memory(k);  // the launch path: a probe, one atomic add
  if (__builtin_expect(!h, 0)) {
    kir::Expected<const kir::cache::Held*> found = cache->cache->lookup(k);  // disk
    if (!found) return set_last_error(found.error());
    h = *found;
    if (!h) return 0;
  }
  // Fill no more than the caller's struct (struct_size), keeping its struct_size.
  uint32_t n = std::min<uint32_t>(out->struct_size, sizeof(kir_cache_entry));
  if (n > sizeof(uint32_t))
    std::memcpy(reinterpret_cast<char*>(out) + sizeof(uint32_t),
                reinterpret_cast<const char*>(&h->entry) + sizeof(uint32_t), n - sizeof(uint32_t));
  out->struct_size = n;
  return 1;
}

int kir_cache_store(kir_cache* cache, kir_hash128 key, const kir_cache_entry* entry) {
  if (!check(cache, "kir_cache_store")) return -1;
  if (!entry) return set_last_error("kir_cache_store: entry is NULL");
  kir_cache_entry e{};
  std::memcpy(&e, entry, std::min<size_t>(entry->struct_size, sizeof e));
  if (entry->struct_size < offsetof(kir_cache_entry, meta_count) + sizeof(size_t))
    return set_last_error("kir_cache_store: entry struct_size " + std::to_string(entry->struct_size) +
                          " is too small (" + std::to_string(sizeof e) + ")");
  if (!e.code && e.code_size) return set_last_error("kir_cache_store: code is NULL");
  // The kind as a number when code_kind is NULL; 0 (not set) leaves code_kind NULL.
  if (!e.code_kind && e.image_kind && entry->struct_size >= offsetof(kir_cache_entry, image_kind) + sizeof(uint32_t)) {
    e.code_kind = kir::cache::code_kind_name(e.image_kind);  // KIR_KIND_*
    if (!e.code_kind)
      return set_last_error("kir_cache_store: image_kind " + std::to_string(e.image_kind) +
                            " is not a kind a cache holds (KIR_KIND_CUBIN, KIR_KIND_PTX, KIR_KIND_CODE_OBJECT)");
  }
  if (!e.code_kind || !e.arch) return set_last_error("kir_cache_store: code_kind or arch is NULL");
  if (!e.meta && e.meta_count) return set_last_error("kir_cache_store: meta is NULL");
  kir::cache::EntryView v;
  v.kind = e.code_kind;
  v.arch = e.arch;
  v.code = kir::ByteView(static_cast<const uint8_t*>(e.code), e.code_size);
  for (size_t i = 0; i < e.meta_count; ++i) {
    if (!e.meta[i].key || !e.meta[i].value)
      return set_last_error("kir_cache_store: meta[" + std::to_string(i) + "] has a NULL key or value");
    v.meta.emplace_back(e.meta[i].key, e.meta[i].value);
  }
  kir::Status s = cache->cache->store(from_c(key), v);
  if (!s) return set_last_error(s.error());
  return 0;
}

int kir_cache_remove(kir_cache* cache, kir_hash128 key) {
  if (!check(cache, "kir_cache_remove")) return -1;
  kir::Expected<bool> r = cache->cache->remove(from_c(key));
  if (!r) return set_last_error(r.error());
  return *r ? 1 : 0;
}

int kir_cache_get_stats(const kir_cache* cache, kir_cache_stats* out) {
  if (!check(cache, "kir_cache_get_stats")) return -1;
  if (!out) return set_last_error("kir_cache_get_stats: out is NULL");
  kir::cache::Stats s = cache->cache->stats();
  kir_cache_stats c{};
  c.struct_size = std::min<uint32_t>(out->struct_size, sizeof c);
  c.hits = s.hits;
  c.memory_hits = s.memory_hits;
  c.misses = s.misses;
  c.errors = s.errors;
  c.evictions = s.evictions;
  c.stores = s.stores;
  std::memcpy(out, &c, c.struct_size);
  return 0;
}

const char* kir_cache_last_problem(const kir_cache* cache) {
  thread_local std::string text;
  text = cache ? cache->cache->last_problem() : std::string();
  return text.c_str();
}

}  // extern "C"
