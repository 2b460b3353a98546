// One launch record (docs/record-format.md): the kernel, the launch, the
// device, and every memory region's contents before and after, as chunk names
// in a ChunkStore. The in-app recorder (libkir_record.so) fills it from device
// memory; tests fill it from host bytes through the Python bindings.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kir/hash/hash.hpp"
#include "kir/kir.h"
#include "kir/record/chunk_store.hpp"

namespace kir::record {

/// A device image or IR module a record carries, stored as one chunk.
struct StoredCode {
  std::string kind;  // "cubin", "ptx" or "" for IR
  std::string arch;
  Hash128 chunk;
  uint64_t size = 0;
};

/// An allocation or a module global, and its contents as chunk names.
/// An app's annotation of an allocation (kir/record.h), as the record stores it.
struct Tolerance {
  std::string dtype, kind, norm, tag;  // metadata::tolerance's choices
  double threshold = 0;
};

struct Region {
  bool global = false;
  std::string name;  // globals
  uint64_t address = 0, size = 0;
  std::string kind;  // allocations: "device", "managed", "host"
  bool in_va_range = false;
  std::optional<std::vector<Hash128>> prologue, epilogue;  // nullopt: not snapshotted
  std::optional<Tolerance> tolerance;                      // allocations: the app's annotation
};

struct Flag {
  std::string flag, detail;
};

class RecordBuilder {
 public:
  RecordBuilder(ChunkStore& store, uint64_t chunk_size);

  void set_process(int64_t pid, int64_t rank);
  void set_device(std::string name, std::string arch, int64_t ordinal);
  void set_kernel(std::string name, std::string demangled, Hash128 static_hash, std::vector<uint32_t> offsets,
                  std::vector<uint32_t> sizes);
  Status set_image(std::string kind, std::string arch, ByteView bytes);
  Status set_ptx(std::string arch, ByteView bytes);
  Status set_ir(ByteView bytes);
  /// Relocatable device code: append the PTX of the next unit the kernel's
  /// registration was device-linked from (link order), stored as one chunk;
  /// written as `kernel.ptx_units` when there is any.
  Status add_ptx_unit(std::string arch, ByteView bytes);
  /// The kernel's runtime-constant (JIT) arguments, as the hook captured them
  /// (kir_hook_kernel.jit_args); written as `kernel.jit_args` when there is any.
  void set_jit_args(std::vector<kir_jit_arg> args) { jit_args_ = std::move(args); }
  /// `launch_identity`: the hook's (kir_hook_launch.launch_identity).
  void set_launch(std::string api, Hash128 launch_identity, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                  uint64_t shared_bytes, uint64_t stream, std::vector<std::vector<uint8_t>> args, uint64_t ordinal);
  void set_va_range(uint64_t base, uint64_t size);
  size_t add_allocation(uint64_t address, uint64_t size, std::string kind, bool in_va_range);
  size_t add_global(std::string name, uint64_t address, uint64_t size);
  /// The app's annotation of allocation `region`.
  void set_tolerance(size_t region, Tolerance tolerance);
  void add_flag(std::string flag, std::string detail);
  /// Flags raised so far (the recorder warns about each).
  const std::vector<Flag>& flags() const { return flags_; }
  const std::vector<Region>& regions() const { return regions_; }

  /// Store `bytes` as region `region`'s contents from byte `offset` on (a
  /// multiple of the chunk size; the whole region in one call, or in parts
  /// that together cover it). `threads` > 1 hashes and compresses chunks in
  /// parallel.
  Status snapshot(size_t region, bool epilogue, uint64_t offset, ByteView bytes, unsigned threads = 1);
  /// snapshot() in parts, for a caller that spreads chunks over its own threads:
  /// begin_snapshot checks that `size` bytes at `offset` fit (as snapshot() does)
  /// and counts them; then snapshot_chunk stores chunk `index` of the region (its
  /// bytes), from any thread, each index once. begin_snapshot calls come from one
  /// thread and may overlap snapshot_chunk calls of parts begun before; metadata()
  /// and write() must not overlap any.
  Status begin_snapshot(size_t region, bool epilogue, uint64_t offset, uint64_t size);
  Status snapshot_chunk(size_t region, bool epilogue, uint64_t index, ByteView bytes);
  uint64_t chunk_size() const { return chunk_size_; }
  /// Timing the recorder measured, kept in the record's `stats`.
  void add_time(bool epilogue, double seconds);
  /// Time spent storing snapshots taken to device memory first (after the app moved on).
  void add_store_time(double seconds) { store_seconds_ += seconds; }
  /// Time the writer waited for a device-to-host copy (the store was done first).
  void add_copy_wait(double seconds) { copy_wait_seconds_ += seconds; }
  /// Threads that could not be started for this record (std::system_error:
  /// a thread limit, `ulimit -u` or a pids cgroup); the work ran on the
  /// threads there were, or on the caller's. snapshot() counts its own; a
  /// caller with threads of its own (the recorder's chunk writers) counts its.
  void count_refused_thread() { ++threads_refused_; }
  uint64_t threads_refused() const { return threads_refused_; }

  /// The metadata as msgpack (the record file's body), written through its field
  /// table (kir/record/metadata.hpp); an Error names a value the format cannot hold.
  Expected<std::vector<uint8_t>> metadata() const;
  /// Write DIR/records/<static>.<launch identity>[.rank<N>].kirrec atomically; returns its path.
  Expected<std::string> write() const;

 private:
  std::vector<Hash128>& chunk_list(size_t region, bool epilogue);
  Status store_code(std::optional<StoredCode>& slot, std::string kind, std::string arch, ByteView bytes);

  ChunkStore& store_;
  uint64_t chunk_size_;
  uint64_t stored_before_;  // the store's byte count when this record began: `stored_bytes` is what it added
  int64_t pid_ = 0, rank_ = -1;
  std::string device_name_, device_arch_;
  int64_t device_ordinal_ = 0;
  std::string name_, demangled_;
  Hash128 static_hash_;
  std::vector<uint32_t> offsets_, sizes_;
  std::optional<StoredCode> image_, ptx_, ir_;
  std::vector<StoredCode> ptx_units_;
  std::vector<kir_jit_arg> jit_args_;
  std::string api_;
  Hash128 launch_identity_;
  std::array<uint32_t, 3> grid_{}, block_{};
  uint64_t shared_bytes_ = 0, stream_ = 0, ordinal_ = 0;
  std::vector<std::vector<uint8_t>> args_;
  std::optional<std::pair<uint64_t, uint64_t>> va_range_;
  std::vector<Region> regions_;
  std::vector<Flag> flags_;
  uint64_t bytes_[2] = {0, 0};
  double seconds_[2] = {0, 0};
  double store_seconds_ = 0;
  double copy_wait_seconds_ = 0;
  uint64_t threads_refused_ = 0;
  ChunkStore::Profile profile_before_;  // the store's profile when this record began
  mutable double sync_seconds_ = 0;     // write(): making the chunks durable
};

}  // namespace kir::record
