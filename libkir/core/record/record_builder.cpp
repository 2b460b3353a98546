// One launch record (kir/record/record_builder.hpp): chunking, the metadata
// map, and the atomic .kirrec write.
#include "kir/record/record_builder.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "kir/kir.h"
#include "kir/support/msgpack.hpp"

namespace kir::record {

RecordBuilder::RecordBuilder(ChunkStore& store, uint64_t chunk_size)
    : store_(store), chunk_size_(chunk_size ? chunk_size : 1), stored_before_(store.stored_bytes()),
      profile_before_(store.profile()) {}

void RecordBuilder::set_process(int64_t pid, int64_t rank) { pid_ = pid, rank_ = rank; }

void RecordBuilder::set_device(std::string name, std::string arch, int64_t ordinal) {
  device_name_ = std::move(name), device_arch_ = std::move(arch), device_ordinal_ = ordinal;
}

void RecordBuilder::set_kernel(std::string name, std::string demangled, Hash128 static_hash,
                               std::vector<uint32_t> offsets, std::vector<uint32_t> sizes) {
  name_ = std::move(name), demangled_ = std::move(demangled), static_hash_ = static_hash;
  offsets_ = std::move(offsets), sizes_ = std::move(sizes);
}

Status RecordBuilder::store_code(std::optional<StoredCode>& slot, std::string kind, std::string arch,
                                 ByteView bytes) {
  Expected<Hash128> chunk = store_.put(bytes);
  if (!chunk) return chunk.error();
  slot = StoredCode{std::move(kind), std::move(arch), *chunk, bytes.size()};
  return {};
}

Status RecordBuilder::set_image(std::string kind, std::string arch, ByteView bytes) {
  return store_code(image_, std::move(kind), std::move(arch), bytes);
}

Status RecordBuilder::set_ptx(std::string arch, ByteView bytes) { return store_code(ptx_, "ptx", std::move(arch), bytes); }

Status RecordBuilder::set_ir(ByteView bytes) { return store_code(ir_, "", "", bytes); }

Status RecordBuilder::add_ptx_unit(std::string arch, ByteView bytes) {
  std::optional<StoredCode> unit;
  if (Status s = store_code(unit, "ptx", std::move(arch), bytes); !s) return s;
  ptx_units_.push_back(std::move(*unit));
  return {};
}

void RecordBuilder::set_launch(std::string api, Hash128 launch_identity, std::array<uint32_t, 3> grid,
                               std::array<uint32_t, 3> block, uint64_t shared_bytes, uint64_t stream,
                               std::vector<std::vector<uint8_t>> args, uint64_t ordinal) {
  api_ = std::move(api), launch_identity_ = launch_identity, grid_ = grid, block_ = block;
  shared_bytes_ = shared_bytes, stream_ = stream, args_ = std::move(args), ordinal_ = ordinal;
}

void RecordBuilder::set_va_range(uint64_t base, uint64_t size) { va_range_ = std::make_pair(base, size); }

size_t RecordBuilder::add_allocation(uint64_t address, uint64_t size, std::string kind, bool in_va_range) {
  Region r;
  r.address = address, r.size = size, r.kind = std::move(kind), r.in_va_range = in_va_range;
  regions_.push_back(std::move(r));
  return regions_.size() - 1;
}

size_t RecordBuilder::add_global(std::string name, uint64_t address, uint64_t size) {
  Region r;
  r.global = true, r.name = std::move(name), r.address = address, r.size = size;
  regions_.push_back(std::move(r));
  return regions_.size() - 1;
}

void RecordBuilder::add_flag(std::string flag, std::string detail) {
  flags_.push_back({std::move(flag), std::move(detail)});
}

std::vector<Hash128>& RecordBuilder::chunk_list(size_t region, bool epilogue) {
  Region& r = regions_[region];
  std::optional<std::vector<Hash128>>& list = epilogue ? r.epilogue : r.prologue;
  if (!list) list.emplace((r.size + chunk_size_ - 1) / chunk_size_);
  return *list;
}

Status RecordBuilder::begin_snapshot(size_t region, bool epilogue, uint64_t offset, uint64_t size) {
  if (region >= regions_.size()) return Error("no region #" + std::to_string(region));
  const Region& r = regions_[region];
  if (offset % chunk_size_ || offset > r.size || size > r.size - offset)
    return Error("snapshot of " + hex(size) + " bytes at " + hex(offset) + " does not fit region #" +
                 std::to_string(region) + " (" + hex(r.size) + " bytes, chunks of " + hex(chunk_size_) + ")");
  if (offset + size != r.size && size % chunk_size_)
    return Error("snapshot of " + hex(size) + " bytes at " + hex(offset) + " of region #" +
                 std::to_string(region) + " (" + hex(r.size) + " bytes) ends inside a chunk of " + hex(chunk_size_) +
                 " bytes: only the region's last part may end off a chunk boundary");
  chunk_list(region, epilogue);  // sized here, before any thread writes into it
  bytes_[epilogue] += size;
  return {};
}

Status RecordBuilder::snapshot_chunk(size_t region, bool epilogue, uint64_t index, ByteView bytes) {
  Region& r = regions_[region];
  std::optional<std::vector<Hash128>>& list = epilogue ? r.epilogue : r.prologue;
  if (!list || index >= list->size())
    return Error("chunk " + std::to_string(index) + " of region #" + std::to_string(region) +
                 ": not in a snapshot begun (begin_snapshot)");
  Expected<Hash128> name = store_.put(bytes);
  if (!name) return name.error();
  (*list)[index] = *name;
  return {};
}

Status RecordBuilder::snapshot(size_t region, bool epilogue, uint64_t offset, ByteView bytes, unsigned threads) {
  if (Status begun = begin_snapshot(region, epilogue, offset, bytes.size()); !begun) return begun;
  uint64_t first = offset / chunk_size_, count = (bytes.size() + chunk_size_ - 1) / chunk_size_;
  std::atomic<uint64_t> next{0};
  std::mutex failure_mutex;
  Status failure;
  auto work = [&] {
    for (uint64_t i; (i = next++) < count;) {
      uint64_t at = i * chunk_size_, n = std::min(chunk_size_, bytes.size() - at);
      if (Status s = snapshot_chunk(region, epilogue, first + i, bytes.sub(at, n)); !s) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        failure = s;
        return;
      }
    }
  };
  unsigned workers = unsigned(std::min<uint64_t>(std::max(1u, threads), count));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < workers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no more threads (a thread limit): go on with those there are
      count_refused_thread();
      break;
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  return failure;
}

void RecordBuilder::add_time(bool epilogue, double seconds) { seconds_[epilogue] += seconds; }

namespace {

void write_code(MsgpackWriter& w, const std::optional<StoredCode>& code, bool with_kind) {
  if (!code) {
    w.nil();
    return;
  }
  w.map(with_kind ? 4 : 2);
  if (with_kind) w.key("kind").str(code->kind).key("arch").str(code->arch);
  w.key("chunk").str(code->chunk.hex()).key("size").uint(code->size);
}

void write_dim(MsgpackWriter& w, const std::array<uint32_t, 3>& d) { w.array(3).uint(d[0]).uint(d[1]).uint(d[2]); }

void write_chunks(MsgpackWriter& w, const std::optional<std::vector<Hash128>>& list) {
  if (!list) {
    w.nil();
    return;
  }
  w.array(uint32_t(list->size()));
  for (const Hash128& h : *list) w.str(h.hex());
}

void write_region(MsgpackWriter& w, const Region& r) {
  w.map(r.global ? 5 : 6);
  if (r.global) w.key("name").str(r.name);
  w.key("address").uint(r.address).key("size").uint(r.size);
  if (!r.global) w.key("kind").str(r.kind).key("in_va_range").boolean(r.in_va_range);
  w.key("prologue");
  write_chunks(w, r.prologue);
  w.key("epilogue");
  write_chunks(w, r.epilogue);
}

double unix_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}


}  // namespace

std::vector<uint8_t> RecordBuilder::metadata() const {
  MsgpackWriter w;
  w.map(14);
  w.key("format").str(format::kMetadataFormat).key("version").uint(format::kVersion);
  w.key("kir_version").str(kir_version()).key("created").f64(unix_time());
  w.key("process").map(2).key("pid").sint(pid_).key("rank").sint(rank_);
  w.key("device").map(3).key("name").str(device_name_).key("arch").str(device_arch_);
  w.key("ordinal").sint(device_ordinal_);

  w.key("kernel").map(7 + !ptx_units_.empty() + !jit_args_.empty()).key("name").str(name_).key("demangled").str(demangled_);
  w.key("static_hash").str(static_hash_.hex()).key("params").array(uint32_t(sizes_.size()));
  for (size_t i = 0; i < sizes_.size(); ++i) w.map(2).key("offset").uint(offsets_[i]).key("size").uint(sizes_[i]);
  w.key("image");
  write_code(w, image_, true);
  w.key("ptx");
  write_code(w, ptx_, true);
  w.key("ir");
  write_code(w, ir_, false);
  if (!ptx_units_.empty()) {  // relocatable device code: every unit's PTX, in link order
    w.key("ptx_units").array(uint32_t(ptx_units_.size()));
    for (const StoredCode& unit : ptx_units_) write_code(w, unit, true);
  }
  if (!jit_args_.empty()) {  // runtime-constant arguments (kir_jit_arg), by position
    static const char* const kinds[] = {"scalar", "array", "object"};
    w.key("jit_args").array(uint32_t(jit_args_.size()));
    for (const kir_jit_arg& a : jit_args_) {
      w.map(7).key("position").uint(a.position).key("kind").str(a.kind < 3 ? kinds[a.kind] : "unknown");
      w.key("type").uint(a.type).key("by_value").uint(a.by_value).key("count").uint(a.count);
      w.key("count_type").uint(a.count_type).key("count_position").uint(a.count_position);
    }
  }

  // Format 1's dynamic hash of the launch (domain kir.dynamic-hash: no shared
  // memory), for readers older than `launch_identity` (docs/hashing.md).
  DynamicHash v1(HashDomain::dynamic_v1, static_hash_, image_ ? image_->arch : device_arch_);
  for (size_t i = 0; i < args_.size(); ++i) v1.arg(uint32_t(i + 1), ArgType::bytes, args_[i].data(), args_[i].size());
  Hash128 dynamic_v1 = v1.grid(grid_[0], grid_[1], grid_[2]).block(block_[0], block_[1], block_[2]).finish();
  w.key("launch").map(9).key("api").str(api_).key("launch_identity").str(launch_identity_.hex());
  w.key("dynamic_hash").str(dynamic_v1.hex());
  w.key("grid");
  write_dim(w, grid_);
  w.key("block");
  write_dim(w, block_);
  w.key("shared_bytes").uint(shared_bytes_).key("stream").uint(stream_);
  w.key("args").array(uint32_t(args_.size()));
  for (const std::vector<uint8_t>& a : args_) w.bin(a.data(), a.size());
  w.key("ordinal").uint(ordinal_);

  w.key("chunk_size").uint(chunk_size_).key("va_range");
  if (va_range_)
    w.map(2).key("base").uint(va_range_->first).key("size").uint(va_range_->second);
  else
    w.nil();
  size_t globals = 0;
  for (const Region& r : regions_) globals += r.global;
  w.key("allocations").array(uint32_t(regions_.size() - globals));
  for (const Region& r : regions_)
    if (!r.global) write_region(w, r);
  w.key("globals").array(uint32_t(globals));
  for (const Region& r : regions_)
    if (r.global) write_region(w, r);
  w.key("flags").array(uint32_t(flags_.size()));
  for (const Flag& f : flags_) w.map(2).key("flag").str(f.flag).key("detail").str(f.detail);
  w.key("stats").map(11).key("prologue_bytes").uint(bytes_[0]).key("prologue_seconds").f64(seconds_[0]);
  w.key("epilogue_bytes").uint(bytes_[1]).key("epilogue_seconds").f64(seconds_[1]);
  w.key("stored_bytes").uint(store_.stored_bytes() - stored_before_).key("store_seconds").f64(store_seconds_);
  // The writer's profile (issue 15): thread-summed seconds since this record began.
  ChunkStore::Profile now = store_.profile();
  w.key("store_hash_seconds").f64(double(now.hash_ns - profile_before_.hash_ns) * 1e-9);
  w.key("store_compress_seconds").f64(double(now.compress_ns - profile_before_.compress_ns) * 1e-9);
  w.key("store_write_seconds").f64(double(now.write_ns - profile_before_.write_ns) * 1e-9);
  w.key("copy_wait_seconds").f64(copy_wait_seconds_);
  w.key("sync_seconds").f64(sync_seconds_);
  return w.take();
}

namespace {

/// A region whose snapshots do not cover it whole (a part never stored), or
/// that has a prologue and no epilogue: the record would not read back.
Status check_complete(const Region& r, size_t index) {
  std::string which = "region #" + std::to_string(index) + " at " + hex(r.address);
  if (bool(r.prologue) != bool(r.epilogue))
    return Error(which + ": has a " + (r.prologue ? "prologue but no epilogue" : "epilogue but no prologue"));
  for (const auto* list : {&r.prologue, &r.epilogue}) {
    if (!*list) continue;
    size_t stored = 0;
    for (const Hash128& h : **list) stored += h != Hash128{};
    if (stored != (*list)->size())
      return Error(which + ": the " + (list == &r.prologue ? "prologue" : "epilogue") + " covers " +
                   std::to_string(stored) + " of its " + std::to_string((*list)->size()) + " chunks");
  }
  return {};
}

}  // namespace

Expected<std::string> RecordBuilder::write() const {
  for (size_t i = 0; i < regions_.size(); ++i)
    if (Status complete = check_complete(regions_[i], i); !complete) return complete.error().within("record not written");
  // The chunks it names reach the disk before the record does (crash-safe order);
  // timed first, so that the record's stats hold it.
  auto sync_start = std::chrono::steady_clock::now();
  if (Status synced = store_.sync(); !synced) return synced.error().within("record not written");
  sync_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  std::vector<uint8_t> body = metadata();
  namespace field = format::record_header;
  std::vector<uint8_t> file(format::kRecordHeader.size);
  format::put_magic(file.data(), format::kRecordHeader);
  format::put(file.data(), field::version, format::kVersion);
  format::put(file.data(), field::reserved, 0);
  format::put(file.data(), field::body_size, body.size());
  Hash128 sum = xxh3_128(ByteView(body.data(), body.size()));
  format::put(file.data(), field::hash_high, sum.high);
  format::put(file.data(), field::hash_low, sum.low);
  file.insert(file.end(), body.begin(), body.end());
  std::string name = static_hash_.hex() + "." + launch_identity_.hex();
  if (rank_ >= 0) name += ".rank" + std::to_string(rank_);
  std::string path = store_.directory() + "/records/" + name + format::kRecordSuffix;
  if (Status written = write_file_atomically(path, file.data(), file.size()); !written) return written.error();
  return path;
}

}  // namespace kir::record
