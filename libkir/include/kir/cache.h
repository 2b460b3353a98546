/* kir — the kernel-object cache: the C ABI (docs/cache.md).
 *
 * Compiled device code (a cubin, PTX, an AMDGPU code object) with its
 * metadata, content-addressed by the 128-bit JIT key (docs/hashing.md), on disk
 * under one directory and in memory. Many processes (MPI ranks) may store into
 * one directory at once: an entry is written to a private temporary, fsynced
 * and renamed into place, so a reader sees a whole entry or none and never
 * waits for a writer. Every entry read from disk is checked (magic, version,
 * bounds, the key inside, an XXH3-128 checksum over the whole file); a damaged
 * one is counted in kir_cache_stats.errors, removed, and answered as a miss.
 * With max_bytes set, the least recently used entries are evicted after a store
 * until the directory holds at most max_bytes of entries.
 *
 * After a key's first lookup its entry stays in memory until kir_cache_close:
 * a repeated lookup is a hash-table probe (no system call, no allocation, no
 * lock), safe from any number of threads. Functions that fail return -1 or
 * NULL with a message in kir_last_error() (and its kind in kir_last_error_code(),
 * the byte offset in kir_last_error_offset(): kir/kir.h). Structs start with
 * struct_size, as in kir/kir.h.
 *
 * Versions (docs/abi.md): KIR_CACHE_ABI_VERSION counts the additions to this
 * header, as KIR_ABI_VERSION does for kir/kir.h; kir_cache_abi_version() is
 * the running library's.
 */
#ifndef KIR_CACHE_H
#define KIR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kir/kir.h"

#ifdef __cplusplus
extern "C" {
#endif

/** This header's ABI version (docs/abi.md). */
#define KIR_CACHE_ABI_VERSION 3

/** The cache ABI version of the libkir running (since cache ABI 3). */
uint32_t kir_cache_abi_version(void);

typedef struct kir_cache kir_cache;

/** kir_cache_options.flags */
#define KIR_CACHE_OPEN_EXISTING 0x1u /* fail when the directory does not exist (default: create it) */

typedef struct kir_cache_options {
  uint32_t struct_size; /* in: sizeof(kir_cache_options) */
  uint64_t max_bytes;   /* 0: unbounded; else LRU eviction keeps the entries' total at most this */
  uint32_t flags;       /* KIR_CACHE_* */
  /* since cache ABI 2: */
  const char* group; /* a cache shared with this group (name or number; NULL or "": none) */
} kir_cache_options;

/** Open (creating it, and its parents, unless KIR_CACHE_OPEN_EXISTING) the cache
 *  under `directory`. `options` may be NULL (unbounded, not shared).
 *  NULL + kir_last_error.
 *
 *  Who may write the cache (docs/cache.md): a directory, shard directory or
 *  entry not owned by the effective user or root, or writable by others, is
 *  refused — never read, never followed: a lookup answers -1 (counted in the
 *  stats' errors and misses; kir_last_error says which file and why) and the
 *  caller runs its own code. With `group` set, the group's members may own and
 *  write it too. Directories kir creates get mode 0700 (02770 and the group
 *  when shared) and entries 0600 (0660), whatever the umask. A shard directory
 *  that is a symbolic link is refused; nothing inside the cache is reached
 *  through a link, and eviction never deletes through one. */
kir_cache* kir_cache_open(const char* directory, const kir_cache_options* options);
/** Close the handle: every entry it returned becomes invalid. NULL is ignored. */
void kir_cache_close(kir_cache* cache);

typedef struct kir_cache_meta {
  const char* key;   /* UTF-8, NUL-terminated */
  const char* value; /* UTF-8, NUL-terminated */
} kir_cache_meta;

typedef struct kir_cache_entry {
  uint32_t struct_size; /* in: sizeof(kir_cache_entry) */
  const void* code;
  size_t code_size;
  const char* code_kind;      /* "cubin" | "ptx" | "code-object" */
  const char* arch;           /* "sm_90", "gfx90a" */
  const kir_cache_meta* meta; /* key inputs, compile options, resources, producer, version */
  size_t meta_count;
  /* since cache ABI 3 (a smaller struct_size leaves it out): */
  uint32_t image_kind; /* code_kind as a number: KIR_KIND_CUBIN, KIR_KIND_PTX or KIR_KIND_CODE_OBJECT
                          (kir.h). Filled by kir_cache_lookup; kir_cache_store reads it when
                          code_kind is NULL */
} kir_cache_entry;

/** Look up `key`: 1 hit (`out` valid until kir_cache_close), 0 miss (also for a
 *  damaged entry, counted in the stats' errors and removed), -1 error (bad
 *  arguments, an unreadable directory, a refused directory or entry). */
int kir_cache_lookup(kir_cache* cache, kir_hash128 key, kir_cache_entry* out);
/** Store `entry` under `key` (replacing an entry of that key): 0 or -1. The
 *  entry is also held in memory, so a later lookup of `key` is a memory hit. */
int kir_cache_store(kir_cache* cache, kir_hash128 key, const kir_cache_entry* entry);

/** Remove `key`'s entry from disk (memory keeps it until close): 1 removed, 0 none, -1 error. */
int kir_cache_remove(kir_cache* cache, kir_hash128 key);

typedef struct kir_cache_stats {
  uint32_t struct_size; /* in: sizeof(kir_cache_stats) */
  uint64_t hits;        /* lookups answered, from memory or disk */
  uint64_t memory_hits; /* of which from memory */
  uint64_t misses;      /* lookups not answered (damaged and refused entries included) */
  uint64_t errors;      /* damaged, refused or unreadable entries met (each also a miss) */
  uint64_t evictions;   /* entries this handle removed to stay under max_bytes */
  uint64_t stores;      /* entries this handle wrote */
} kir_cache_stats;

/** This handle's counters since open. 0 or -1. */
int kir_cache_get_stats(const kir_cache* cache, kir_cache_stats* out);

/** The message of the last damaged entry this handle met ("" if none): what,
 *  which file, which byte offset. A copy in the calling thread's storage, valid
 *  until that thread calls kir_cache_last_problem again. */
const char* kir_cache_last_problem(const kir_cache* cache);

#ifdef __cplusplus
}
#endif

#endif /* KIR_CACHE_H */
