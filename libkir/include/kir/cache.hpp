// The kernel-object cache (docs/cache.md): the entry format and the on-disk,
// in-memory cache. kir/cache.h is the C ABI over this.
//
// An entry file holds one compiled object (cubin, PTX, code object) with its
// key, code kind, arch and metadata, closed by an XXH3-128 checksum over every
// byte before it. encode_entry writes that layout, parse_entry reads it with
// every size bounded by the bytes present (it never reads out of bounds, for
// any input: tests/native/fuzz/fuzz_cache_entry.cpp).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kir/cache.h"
#include "kir/hash/hash.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir::cache {

/// The layout (docs/cache.md); all integers little-endian.
constexpr char kMagic[8] = {'K', 'I', 'R', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kHeaderSize = 64;
constexpr uint32_t kChecksumSize = 16;
constexpr uint32_t kCodeAlignment = 16;  // code starts at a multiple of this (device loaders like aligned ELF)
// Bounds every reader and writer enforces.
constexpr uint32_t kMaxArch = 64;
constexpr uint32_t kMaxMetaCount = 1024;
constexpr uint64_t kMaxMetaBytes = uint64_t(1) << 20;
constexpr uint64_t kMaxCodeSize = uint64_t(1) << 30;
constexpr uint64_t kMaxEntrySize =
    kHeaderSize + kMaxArch + kMaxMetaBytes + kCodeAlignment + kMaxCodeSize + kChecksumSize;

/// Header field offsets.
namespace field {
constexpr uint32_t kMagic = 0, kVersion = 8, kHeaderSize = 12, kKey = 16, kCodeKind = 32, kMetaCount = 36,
                   kCodeSize = 40, kMetaBytes = 48, kArchSize = 56, kReserved = 60;
}

/// Code kinds: kir.h's KIR_KIND_* numbers, by name.
uint32_t code_kind_number(std::string_view name);  // 0 when not a cacheable kind
const char* code_kind_name(uint32_t number);       // nullptr when not a cacheable kind

/// One entry's parts, as views into the bytes it was parsed from (or strings
/// the caller owns, for encode_entry).
struct EntryView {
  Hash128 key;
  std::string_view kind;  // "cubin", "ptx", "code-object"
  std::string_view arch;
  std::vector<std::pair<std::string_view, std::string_view>> meta;
  ByteView code;
};

/// Parse and check an entry file's bytes: magic, version, bounded sizes, valid
/// UTF-8 without NUL, the checksum, and (when given) that its key is `expected`.
/// On failure returns an Error "at byte offset 0x..: ..." whose offset() is
/// that of the offending field and whose code says what is wrong (truncated,
/// bad_magic, unsupported_version, corrupt for a checksum mismatch ...).
Expected<EntryView> parse_entry(ByteView bytes, const Hash128* expected = nullptr);

/// The bytes of an entry file (checks the same bounds the reader enforces).
Expected<std::vector<uint8_t>> encode_entry(const EntryView& entry);

/// "ab/abcdef…": an entry's path relative to the cache directory.
std::string entry_relative_path(const Hash128& key);

struct Options {
  uint64_t max_bytes = 0;  // 0: unbounded
  bool create = true;      // create the directory when missing
  /// A cache shared with a group (docs/cache.md, "Who may write the cache"): the
  /// group's name or number, whose members may write it. Empty: only the
  /// effective user (and root) may.
  std::string group;
};

struct Stats {
  uint64_t hits = 0, memory_hits = 0, misses = 0, errors = 0, evictions = 0, stores = 0;
};

/// An entry held in memory: owns its bytes and the C view of them.
struct Held {
  Hash128 key;
  std::vector<uint8_t> bytes;        // the whole entry file
  std::vector<char> strings;         // kind, arch, meta keys and values, NUL-terminated
  std::vector<kir_cache_meta> meta;  // points into strings
  kir_cache_entry entry{};           // points into bytes, strings, meta
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;  // the entry file's access stamp when read
};

/// One file (or refused directory) of the cache, as `entries()` and `verify()` see it.
struct Listing {
  std::string path;
  Hash128 key;
  bool has_key = false;  // the file's name is a key (32 hex digits)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::shared_ptr<const Held> entry;  // null when damaged or refused (see problem)
  std::string problem;
  uint64_t problem_offset = UINT64_MAX;  // UINT64_MAX: not about a byte of the file
  bool refused = false;                  // not trusted: another user's, writable by others, or a link (docs/cache.md)
};

class Cache {
 public:
  static Expected<std::unique_ptr<Cache>> open(const std::string& directory, const Options& options);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const std::string& directory() const { return directory_; }

  /// The launch path: the entry of `key` held in memory, or nullptr. No system
  /// call, no allocation, no lock; safe from any thread.
  const Held* find_in_memory(const Hash128& key) const;
  /// find_in_memory, counted as a memory hit when found (one relaxed atomic add).
  const Held* hit_in_memory(const Hash128& key) const {
    const Held* h = find_in_memory(key);
    if (h) memory_hits_[stripe()].n.fetch_add(1, std::memory_order_relaxed);
    return h;
  }

  /// Memory, else disk: the entry (valid until the Cache is destroyed), nullptr
  /// for a miss (a damaged entry is a miss, counted and removed), or an Error
  /// for a refused directory, shard or entry (not trusted: docs/cache.md; counted
  /// as an error and a miss, left in place) or a failure that is not about an
  /// entry (the directory unreadable).
  Expected<const Held*> lookup(const Hash128& key);

  /// Write `entry` under `key` (atomically, replacing any entry of that key),
  /// hold it in memory, then evict to max_bytes.
  Status store(const Hash128& key, const EntryView& entry);

  /// Remove `key`'s file; true when there was one.
  Expected<bool> remove(const Hash128& key);

  /// Every entry file (read and checked), damaged and refused ones with their
  /// problem; with `problems_too`, also stray files (stale temporaries, misplaced
  /// names) and refused directories (nothing beneath one is read).
  Expected<std::vector<Listing>> list(bool problems_too = false) const;

  /// Evict least-recently-used entries until the entries total at most
  /// `max_bytes`, never `keep`. Returns how many were removed.
  Expected<uint64_t> evict(uint64_t max_bytes, const Hash128* keep = nullptr);

  Stats stats() const;
  std::string last_problem() const;

  /// Who may have written the files this cache reads (docs/cache.md, "Who may
  /// write the cache").
  struct Trust {
    uid_t user = 0;       // the effective user
    bool shared = false;  // a group cache
    gid_t group = 0;
    std::string group_name;
    /// "" when a directory or entry with this status may be read, else why not.
    std::string refusal(const struct stat& st) const;
  };

 private:
  struct Table;
  Cache(std::string directory, const Options& options, const Trust& trust, int directory_fd);
  const Held* publish(std::unique_ptr<Held> held);
  void problem(const std::string& message);
  Error refuse(const std::string& message);

  std::string directory_;
  Options options_;
  Trust trust_;
  int directory_fd_ = -1;  // every file is reached from it (openat: no path is resolved again)
  std::string refused_;    // why the directory itself is refused ("" when trusted)
  std::atomic<Table*> table_{nullptr};
  mutable std::mutex mutex_;                    // writers of the table, last_problem_
  std::vector<std::unique_ptr<Table>> tables_;  // every table ever published (readers may hold old ones)
  std::vector<std::unique_ptr<Held>> held_;
  std::string last_problem_;
  /// Memory hits are counted in one of kStripes cache lines per thread, so
  /// threads hitting at once do not contend for one counter's line.
  static constexpr unsigned kStripes = 16;
  struct alignas(64) Stripe {
    std::atomic<uint64_t> n{0};
  };
  static unsigned stripe();
  mutable Stripe memory_hits_[kStripes];
  mutable std::atomic<uint64_t> disk_hits_{0}, misses_{0}, errors_{0}, evictions_{0}, stores_{0};
};

}  // namespace kir::cache
