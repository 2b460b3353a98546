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
#include "kir/record/metadata.hpp"
#include "kir/support/msgpack.hpp"

namespace kir::record {

RecordBuilder::RecordBuilder(ChunkStore& store, uint64_t chunk_size)
    : store_(store),
      chunk_size_(chunk_size ? chunk_size : 1),
      stored_before_(store.stored_bytes()),
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

Status RecordBuilder::store_code(std::optional<StoredCode>& slot, std::string kind, std::string arch, ByteView bytes) {
  Expected<Hash128> chunk = store_.put(bytes);
  if (!chunk) return chunk.error();
  slot = StoredCode{std::move(kind), std::move(arch), *chunk, bytes.size()};
  return {};
}

Status RecordBuilder::set_image(std::string kind, std::string arch, ByteView bytes) {
  return store_code(image_, std::move(kind), std::move(arch), bytes);
}

Status RecordBuilder::set_ptx(std::string arch, ByteView bytes) {
  return store_code(ptx_, "ptx", std::move(arch), bytes);
}

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

void RecordBuilder::set_tolerance(size_t region, Tolerance tolerance) {
  if (region < regions_.size() && !regions_[region].global) regions_[region].tolerance = std::move(tolerance);
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
    return Error("snapshot of " + hex(size) + " bytes at " + hex(offset) + " of region #" + std::to_string(region) +
                 " (" + hex(r.size) + " bytes) ends inside a chunk of " + hex(chunk_size_) +
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

namespace m = metadata;

void write_code_fields(m::MapWriter& c, const StoredCode& code) {
  c.str(m::code::kind, code.kind);
  c.str(m::code::arch, code.arch);
  c.str(m::code::chunk, code.chunk.hex());
  c.uint(m::code::size, code.size);
}

void write_code(m::MapWriter& kernel, const m::Field& f, const std::optional<StoredCode>& code) {
  if (!code) return kernel.nil(f);
  m::MapWriter c = kernel.map(f);
  write_code_fields(c, *code);
  (void)c.end();  // an error reaches the kernel's map, and the record's
}

void write_region(m::MapWriter& list, const m::Field& f, const Region& r) {
  namespace k = m::region;
  m::MapWriter w = list.item(f);
  if (r.global) w.str(k::name, r.name);
  w.uint(k::address, r.address);
  w.uint(k::size, r.size);
  if (!r.global) w.str(k::kind, r.kind), w.boolean(k::in_va_range, r.in_va_range);
  for (const m::Field* which : {&k::prologue, &k::epilogue}) {
    const std::optional<std::vector<Hash128>>& names = which == &k::prologue ? r.prologue : r.epilogue;
    if (names) w.chunks(*which, *names);
    else w.nil(*which);
  }
  if (!r.global && !r.tolerance) w.nil(k::tolerance);
  if (!r.global && r.tolerance) {
    namespace t = m::tolerance;
    m::MapWriter tw = w.map(k::tolerance);
    tw.str(t::dtype, r.tolerance->dtype);
    tw.str(t::kind, r.tolerance->kind);
    tw.number(t::threshold, r.tolerance->threshold);
    tw.str(t::norm, r.tolerance->norm);
    tw.str(t::tag, r.tolerance->tag);
    (void)tw.end();  // an error reaches the region's map, and the record's
  }
  (void)w.end();
}

double unix_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

Expected<std::vector<uint8_t>> RecordBuilder::metadata() const {
  MsgpackWriter out;
  m::MapWriter w(out, m::record::table);
  namespace r = m::record;
  w.str(r::format, format::kMetadataFormat);
  w.uint(r::version, format::kVersion);
  w.str(r::kir_version, kir_version());
  w.number(r::created, unix_time());
  {
    m::MapWriter p = w.map(r::process);
    p.sint(m::process::pid, pid_);
    p.sint(m::process::rank, rank_);
    (void)p.end();
  }
  {
    m::MapWriter d = w.map(r::device);
    d.str(m::device::name, device_name_);
    d.str(m::device::arch, device_arch_);
    d.sint(m::device::ordinal, device_ordinal_);
    (void)d.end();
  }
  {
    namespace k = m::kernel;
    m::MapWriter kernel = w.map(r::kernel);
    kernel.str(k::name, name_);
    kernel.str(k::demangled, demangled_);
    kernel.str(k::static_hash, static_hash_.hex());
    kernel.list(k::params, uint32_t(sizes_.size()));
    for (size_t i = 0; i < sizes_.size(); ++i) {
      m::MapWriter p = kernel.item(k::params);
      p.uint(m::param::offset, offsets_[i]);
      p.uint(m::param::size, sizes_[i]);
      (void)p.end();
    }
    write_code(kernel, k::image, image_);
    write_code(kernel, k::ptx, ptx_);
    if (ir_) {
      m::MapWriter ir = kernel.map(k::ir);
      ir.str(m::ir::chunk, ir_->chunk.hex());
      ir.uint(m::ir::size, ir_->size);
      (void)ir.end();
    } else {
      kernel.nil(k::ir);
    }
    kernel.list(k::ptx_units, uint32_t(ptx_units_.size()));  // relocatable device code: in link order
    for (const StoredCode& unit : ptx_units_) {
      m::MapWriter c = kernel.item(k::ptx_units);
      write_code_fields(c, unit);
      (void)c.end();
    }
    kernel.list(k::jit_args, uint32_t(jit_args_.size()));  // runtime-constant arguments, by position
    for (const kir_jit_arg& a : jit_args_) {
      namespace j = m::jit_arg;
      m::MapWriter arg = kernel.item(k::jit_args);
      arg.uint(j::position, a.position);
      // KIR_JIT_VECTOR (kir.h ABI 10) is written as the by-value array it was before: a
      // format version's choices never change (docs/record-format.md, "Compatibility"),
      // and a vector's key and replay are a by-value array's.
      uint8_t kind = a.kind == KIR_JIT_VECTOR ? uint8_t(KIR_JIT_ARRAY) : a.kind;
      arg.str(j::kind, kind < 3 ? j::kKinds[kind] : "unknown");
      arg.uint(j::type, a.type);
      arg.uint(j::by_value, a.by_value);
      arg.uint(j::count, a.count);
      arg.uint(j::count_type, a.count_type);
      arg.uint(j::count_position, a.count_position);
      (void)arg.end();
    }
    (void)kernel.end();
  }
  {
    namespace l = m::launch;
    m::MapWriter launch = w.map(r::launch);
    launch.str(l::api, api_);
    launch.str(l::launch_identity, launch_identity_.hex());
    launch.dims(l::grid, grid_);
    launch.dims(l::block, block_);
    launch.uint(l::shared_bytes, shared_bytes_);
    launch.uint(l::stream, stream_);
    launch.bins(l::args, args_);
    launch.uint(l::ordinal, ordinal_);
    (void)launch.end();
  }
  w.uint(r::chunk_size, chunk_size_);
  if (va_range_) {
    m::MapWriter va = w.map(r::va_range);
    va.uint(m::va_range::base, va_range_->first);
    va.uint(m::va_range::size, va_range_->second);
    (void)va.end();
  } else {
    w.nil(r::va_range);
  }
  size_t globals = 0;
  for (const Region& region : regions_) globals += region.global;
  w.list(r::allocations, uint32_t(regions_.size() - globals));
  for (const Region& region : regions_)
    if (!region.global) write_region(w, r::allocations, region);
  w.list(r::globals, uint32_t(globals));
  for (const Region& region : regions_)
    if (region.global) write_region(w, r::globals, region);
  w.list(r::flags, uint32_t(flags_.size()));
  for (const Flag& f : flags_) {
    m::MapWriter flag = w.item(r::flags);
    flag.str(m::flag::flag, f.flag);
    flag.str(m::flag::detail, f.detail);
    (void)flag.end();
  }
  {
    namespace t = m::stats;
    m::MapWriter stats = w.map(r::stats);
    stats.uint(t::prologue_bytes, bytes_[0]);
    stats.number(t::prologue_seconds, seconds_[0]);
    stats.uint(t::epilogue_bytes, bytes_[1]);
    stats.number(t::epilogue_seconds, seconds_[1]);
    stats.uint(t::stored_bytes, store_.stored_bytes() - stored_before_);
    stats.number(t::store_seconds, store_seconds_);
    // The writer's profile (issue 15): thread-summed seconds since this record began.
    ChunkStore::Profile now = store_.profile();
    stats.number(t::store_hash_seconds, double(now.hash_ns - profile_before_.hash_ns) * 1e-9);
    stats.number(t::store_compress_seconds, double(now.compress_ns - profile_before_.compress_ns) * 1e-9);
    stats.number(t::store_write_seconds, double(now.write_ns - profile_before_.write_ns) * 1e-9);
    stats.number(t::copy_wait_seconds, copy_wait_seconds_);
    stats.number(t::sync_seconds, sync_seconds_);
    (void)stats.end();
  }
  if (Status written = w.end(); !written) return written.error();
  return out.take();
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
    if (Status complete = check_complete(regions_[i], i); !complete)
      return complete.error().within("record not written");
  // The chunks it names reach the disk before the record does (crash-safe order);
  // timed first, so that the record's stats hold it.
  auto sync_start = std::chrono::steady_clock::now();
  if (Status synced = store_.sync(); !synced) return synced.error().within("record not written");
  sync_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  Expected<std::vector<uint8_t>> metadata_body = metadata();
  if (!metadata_body) return metadata_body.error().within("record not written");
  std::vector<uint8_t>& body = *metadata_body;
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
