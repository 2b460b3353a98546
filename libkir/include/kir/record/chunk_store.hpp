// The content-addressed chunk store of a recording (docs/record-format.md):
// DIR/chunks/<XXH3-128>.kirc, each chunk zstd-compressed (or raw when that
// does not shrink it), written atomically, and stored once however often it
// recurs — across regions, launches, and prologue/epilogue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kir/hash/hash.hpp"
#include "kir/record/format.hpp"
#include "kir/support/bytes.hpp"
#include "kir/support/error.hpp"

namespace kir::record {

/// Write `bytes` to `path` atomically: a temporary file in the same directory
/// (unpredictable name, O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), fsync (with `sync_data`), rename,
/// and with `sync_parent` fsync of the directory. A crash leaves the old state
/// or the new, never a part.
Status write_file_atomically(const std::string& path, const void* bytes, uint64_t size, bool sync_parent = true,
                             bool sync_data = true);
/// The same for a file of two parts written one after the other (a header and a
/// body kept elsewhere: nothing is copied to join them); with `start_writeback`
/// (and no `sync_data`), the file's writeback to disk is started before it is
/// closed (sync_file_range: the caller makes it durable later).
Status write_file_atomically(const std::string& path, ByteView head, ByteView body, bool sync_parent = true,
                             bool sync_data = true, bool start_writeback = false);

/// Thread-safe: many threads may put() at once.
class ChunkStore {
 public:
  /// Creates DIR, DIR/chunks and DIR/records when missing (mode 0700). An
  /// existing DIR must be a directory, empty or a recording (chunks/ or records/).
  static Expected<std::unique_ptr<ChunkStore>> open(const std::string& directory, int zstd_level = 1);

  /// Store `raw` (unless stored already) and return its name, XXH3-128 of `raw`.
  Expected<Hash128> put(ByteView raw);
  /// Store `raw` whose XXH3-128 the caller computed already.
  Status put(ByteView raw, const Hash128& name);

  const std::string& directory() const { return directory_; }
  /// Whether each chunk file's writeback starts as soon as it is written
  /// (sync_file_range, default on): the disk works while later chunks are stored,
  /// and sync() before a record finds most of the bytes written already.
  void set_early_writeback(bool on) { early_writeback_ = on; }
  /// Make the chunks stored so far durable, data and names (one syncfs of the
  /// file system holding them): before a record names them.
  Status sync() const;
  std::string chunk_path(const Hash128& name) const;
  /// Bytes this store wrote to disk (headers included), and chunks written.
  uint64_t stored_bytes() const { return stored_bytes_; }
  uint64_t stored_chunks() const { return stored_chunks_; }
  /// Where the store's threads spent their time (nanoseconds summed over threads,
  /// since the store opened): hashing chunks, compressing them (the probe
  /// included), writing their files (issue 15: the writer's profile).
  struct Profile {
    uint64_t hash_ns = 0, compress_ns = 0, write_ns = 0;
  };
  Profile profile() const { return {hash_ns_.load(), compress_ns_.load(), write_ns_.load()}; }

 private:
  ChunkStore(std::string directory, int zstd_level) : directory_(std::move(directory)), level_(zstd_level) {}
  /// Claim `name` for this thread to store: false when it is stored already
  /// (waiting for another thread that is storing it right now).
  bool claim(const Hash128& name);
  void settle(const Hash128& name, bool stored);
  Status write_chunk(ByteView raw, const Hash128& name);

  std::string directory_;
  int level_;
  bool early_writeback_ = true;
  std::mutex known_mutex_;
  std::condition_variable settled_;
  struct NameHash {
    size_t operator()(const Hash128& h) const { return size_t(h.low ^ (h.high * 0x9e3779b97f4a7c15ull)); }
  };
  std::unordered_map<Hash128, bool, NameHash> known_;  // name -> stored (false: being stored)
  std::atomic<uint64_t> stored_bytes_{0};
  std::atomic<uint64_t> stored_chunks_{0};
  std::atomic<uint64_t> hash_ns_{0}, compress_ns_{0}, write_ns_{0};
};

}  // namespace kir::record
