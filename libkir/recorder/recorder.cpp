// libkir_record.so: the recording client of the hook layer (docs/recording.md).
// Loaded through KIR_HOOK_CLIENTS (as `kir record` runs apps). It serves device
// allocations from a fixed virtual-address range (VaAllocator) and, for each
// selected launch, stores the memory the kernel can reach before it and after
// it, with the kernel's code and arguments, as one record.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "crash_flush.hpp"
#include "driver.hpp"
#include "kir/device_code.hpp"
#include "kir/hooks.h"
#include "kir/model.hpp"
#include "kir/record.h"
#include "kir/record/format.hpp"
#include "kir/record/metadata.hpp"
#include "kir/record/reachability.hpp"
#include "kir/record/record_builder.hpp"
#include "kir/support/demangle.hpp"
#include "kir/support/kernel_pattern.hpp"
#include "kir_hook_internal/settings.hpp"
#include "snapshot.hpp"
#include "va_allocator.hpp"

#define KIR_EXPORT __attribute__((visibility("default")))

namespace kir::record {

namespace {

void say(const std::string& text) { std::fprintf(stderr, "kir-record: %s\n", text.c_str()); }

// ---------------------------------------------------------------- settings

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* v = kir::hook::setting(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

/// The MPI rank the launcher gave this process, or -1.
int64_t launcher_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID", "SLURM_PROCID"})
    if (const char* v = kir::hook::setting(name); v && *v) return std::strtoll(v, nullptr, 10);
  return -1;
}

/// Whether KIR_RECORD_RANKS ("0,3") selects `rank` (all ranks when unset).
bool rank_selected(int64_t rank) {
  const char* list = kir::hook::setting("KIR_RECORD_RANKS");
  if (!list || !*list) return true;
  std::string text = list;
  for (size_t at = 0; at <= text.size();) {
    size_t comma = std::min(text.find(',', at), text.size());
    if (std::strtoll(text.substr(at, comma - at).c_str(), nullptr, 10) == std::max<int64_t>(rank, 0)) return true;
    at = comma + 1;
  }
  return false;
}

struct Settings {
  std::string directory;
  std::optional<KernelPattern> kernels;
  bool kernels_invalid = false;  // KIR_RECORD_KERNELS did not compile: select nothing
  uint64_t max_per_kernel = 4, skip = 0;
  bool reachable = false, use_va = true, verbose = false;
  uint64_t va_base = 0x153940000000ull, va_size = 64ull << 30;
  uint64_t chunk_size = 4 << 20, staging = 256 << 20;
  int zstd_level = 1;
  unsigned threads = 1;
  bool early_writeback = true;

  static Settings from_environment() {
    Settings s;
    const char* dir = kir::hook::setting("KIR_RECORD_DIR");
    s.directory = dir && *dir ? dir : "kir-records";
    if (const char* re = kir::hook::setting("KIR_RECORD_KERNELS"); re && *re) {
      // The CLI checked it with the same function; set by hand, a bad one records nothing (never throws).
      if (auto compiled = KernelPattern::create(re)) s.kernels = std::move(*compiled);
      else {
        say(std::string("error: KIR_RECORD_KERNELS '") + re + "': " + compiled.error().message() +
            "; recording nothing");
        s.kernels_invalid = true;
      }
    }
    s.max_per_kernel = env_number("KIR_RECORD_MAX_PER_KERNEL", 4);
    s.skip = env_number("KIR_RECORD_SKIP", 0);
    s.reachable = env_number("KIR_RECORD_REACHABLE", 0) != 0;
    s.verbose = env_number("KIR_RECORD_VERBOSE", 0) != 0;
    s.use_va = env_number("KIR_RECORD_NO_VA", 0) == 0;
    s.va_base = env_number("KIR_RECORD_VA_BASE", s.va_base);
    s.va_size = env_number("KIR_RECORD_VA_SIZE", s.va_size);
    s.chunk_size = std::clamp<uint64_t>(env_number("KIR_RECORD_CHUNK_SIZE", s.chunk_size), 4096,
                                        kir::record::format::kMaxChunkBytes);  // what a reader accepts
    s.staging = std::max(s.chunk_size, s.staging / s.chunk_size * s.chunk_size);
    s.zstd_level = int(env_number("KIR_RECORD_ZSTD_LEVEL", 1));
    s.early_writeback = env_number("KIR_RECORD_WRITEBACK", 1) != 0;
    s.threads = unsigned(env_number("KIR_RECORD_THREADS", std::max(1u, std::thread::hardware_concurrency())));
    return s;
  }
};

// ------------------------------------------------------- what a launch reaches

std::vector<kir_hook_allocation> live_allocations() {
  std::vector<kir_hook_allocation> out;
  kir_hook_for_each_allocation(
      [](void* user, const kir_hook_allocation* a) {
        static_cast<std::vector<kir_hook_allocation>*>(user)->push_back(*a);
      },
      &out);
  return out;
}

/// The app's annotation of the allocation starting at `address` (kir/record.h), as
/// the record stores it (metadata::tolerance's choices, indexed by the KIR_* values).
std::optional<Tolerance> annotation_of(uint64_t address) {
  kir_record_annotation a{};
  a.struct_size = sizeof a;
  if (!kir_hook_allocation_annotation(address, &a)) return std::nullopt;
  namespace t = metadata::tolerance;
  Tolerance out;
  out.dtype = t::kDtypes[a.dtype - KIR_DTYPE_F16];  // checked by kir_record_annotate
  out.kind = t::kKinds[a.kind];
  out.norm = t::kNorms[a.norm];
  out.threshold = a.threshold;
  out.tag = a.tag ? a.tag : "";
  return out;
}

/// An allocation's kind as records name it (kir/model.hpp's one table).
const char* kind_name(int kind) { return kir::name(AllocationKind(kind)); }

struct ModuleGlobal {
  std::string name;
  uint64_t address, size;
};

/// The device variables of the kernel's fatbin or module (kir_hook_fatbin_globals: its own,
/// not every global of the process), at their device addresses.
std::vector<ModuleGlobal> module_globals(const kir_hook_kernel& kernel) {
  std::vector<const kir_hook_global*> globals(kir_hook_fatbin_globals(kernel.fatbin, nullptr, 0));
  globals.resize(kir_hook_fatbin_globals(kernel.fatbin, globals.data(), globals.size()));
  std::vector<ModuleGlobal> out;
  for (const kir_hook_global* g : globals) {
    if (!g || !g->size) continue;
    if (uint64_t address = kir_hook_global_device_address(g->host_address))
      out.push_back({g->name ? g->name : "", address, g->size});
  }
  return out;
}

/// An argument's bytes as the app passed them.
std::vector<std::vector<uint8_t>> argument_bytes(const kir_hook_launch& l) {
  std::vector<std::vector<uint8_t>> out;
  const kir_hook_kernel& k = *l.kernel;
  for (uint32_t i = 0; i < k.param_count && l.args; ++i) {
    const auto* p = static_cast<const uint8_t*>(l.args[i]);
    out.emplace_back(p, p + k.param_sizes[i]);
  }
  return out;
}

/// Pointer-sized argument values: the roots of what the launch reaches.
std::vector<uint64_t> pointer_candidates(const std::vector<std::vector<uint8_t>>& args) {
  std::vector<uint64_t> out;
  for (const std::vector<uint8_t>& a : args)
    for (size_t at = 0; at + 8 <= a.size(); at += 8) {  // by-value structs may hold pointers too
      uint64_t v;
      std::memcpy(&v, a.data() + at, 8);
      if (v) out.push_back(v);
    }
  return out;
}

// ------------------------------------------------------------------ recorder

class Recorder {
 public:
  explicit Recorder(Settings s) : settings_(std::move(s)), rank_(launcher_rank()) {}

  bool start();
  void launch_begin(const kir_hook_launch& l);
  void launch_completed(const kir_hook_launch& l);
  int allocate(uint64_t size, const void* stream, uint64_t* address);
  int release(uint64_t address, const void* stream);
  /// One line on stderr: what was recorded where.
  void summarize();

 private:
  struct Pending {
    ~Pending();  // counts the threads its builder could not start
    std::unique_ptr<RecordBuilder> builder;
    std::vector<size_t> snapshotted;
    std::string label;
    // Copies on the device, stored to the record later by the writer thread.
    std::optional<Snapshotter::DeviceCopy> prologue, epilogue;
  };

  bool selected(const kir_hook_launch& l, uint64_t& ordinal);
  bool name_selected(const std::string& name) const;
  std::unique_ptr<Pending> begin_record(const kir_hook_launch& l, uint64_t ordinal);
  void describe_kernel(RecordBuilder& b, const kir_hook_launch& l);
  std::vector<size_t> add_regions(RecordBuilder& b, const kir_hook_launch& l,
                                  const std::vector<std::vector<uint8_t>>& args);
  void flag_arguments(RecordBuilder& b, const std::vector<std::vector<uint8_t>>& args,
                      const std::vector<ModuleGlobal>& globals);
  Status snapshot_prologue(Pending& p, const std::vector<uint64_t>& roots);
  /// Store what is left of `p` (device copies) and write it: on the writer thread.
  void finish_record(Pending& p);
  void wait_for_writer();

  Settings settings_;
  int64_t rank_;
  const RecorderDriver* driver_ = nullptr;
  std::unique_ptr<ChunkStore> store_;
  std::unique_ptr<VaAllocator> va_;
  std::unique_ptr<Snapshotter> snapshotter_;
  std::string device_name_, device_arch_;
  int device_ = -1;

  std::mutex selection_mutex_;
  struct KernelState {
    uint64_t launches = 0, recorded = 0;
    bool matches = false;  // by --kernel
  };
  std::unordered_map<const void*, KernelState> kernels_;
  std::set<std::pair<uint64_t, uint64_t>> seen_;  // launch identities recorded
  uint64_t seen_launches_ = 0, unknown_launches_ = 0;
  std::atomic<uint64_t> written_{0}, failed_{0};
  std::atomic<uint64_t> threads_refused_{0};  // thread starts refused (a thread limit): the work ran on fewer
  std::mutex recording_mutex_;                // one launch recorded at a time, prologue to epilogue
  static thread_local std::unique_ptr<Pending> pending_;
  std::thread writer_;       // stores and writes the last record while the app runs on
  std::mutex writer_mutex_;  // joining and starting writer_
  bool exit_hook_ = false;
  std::atomic<bool> va_warned_{false};  // allocations come from any thread
};

thread_local std::unique_ptr<Recorder::Pending> Recorder::pending_;

Recorder* the_recorder = nullptr;  // the process's one recorder, once started

Recorder::Pending::~Pending() {
  if (builder && the_recorder) the_recorder->threads_refused_ += builder->threads_refused();
}

bool Recorder::start() {
  std::string why;
  driver_ = RecorderDriver::get(&why);
  if (!driver_) {
    say("disabled: " + why);
    return false;
  }
  Expected<std::unique_ptr<ChunkStore>> store = ChunkStore::open(settings_.directory, settings_.zstd_level);
  if (!store) {
    say("disabled: " + store.error().message());
    return false;
  }
  store_ = std::move(*store);
  store_->set_early_writeback(settings_.early_writeback);
  snapshotter_ = std::make_unique<Snapshotter>(*driver_, settings_.staging, settings_.threads);
  if (settings_.use_va) va_ = std::make_unique<VaAllocator>(*driver_, settings_.va_base, settings_.va_size);
  return true;
}

int Recorder::allocate(uint64_t size, const void*, uint64_t* address) {
  if (!va_) return 1;
  if (!va_->ready()) {
    if (!va_warned_.exchange(true))
      say("warning: cannot reserve the VA range: " + va_->why() +
          "; allocations fall back to the runtime (records get the outside-va-range flag)");
    return 1;
  }
  *address = va_->allocate(size);
  if (!*address && !va_warned_.exchange(true))
    say("warning: " + va_->why() + "; this allocation falls back to the runtime");
  return *address ? 0 : 1;
}

int Recorder::release(uint64_t address, const void* stream) {
  if (!va_ || !va_->holds(address)) return 0;
  // Work already queued may still use the memory: wait for it before unmapping.
  if (stream) driver_->stream_synchronize(const_cast<void*>(stream));
  else driver_->synchronize();
  return va_->release(address) ? 1 : 0;
}

bool Recorder::selected(const kir_hook_launch& l, uint64_t& ordinal) {
  const kir_hook_kernel* k = l.kernel;
  std::lock_guard<std::mutex> lock(selection_mutex_);
  ++seen_launches_;
  if (!k) {
    ++unknown_launches_;
    return false;
  }
  auto [it, first] = kernels_.try_emplace(k);
  KernelState& state = it->second;
  if (first) state.matches = name_selected(k->name ? k->name : "");  // once per kernel, not per launch
  ordinal = state.launches++;
  if (!state.matches || ordinal < settings_.skip) return false;
  if (settings_.max_per_kernel && state.recorded >= settings_.max_per_kernel) return false;
  if (!seen_.insert({l.launch_identity.high, l.launch_identity.low}).second) return false;  // recorded this one
  ++state.recorded;
  return true;
}

bool Recorder::name_selected(const std::string& name) const {
  if (settings_.kernels_invalid) return false;
  return !settings_.kernels || settings_.kernels->selects(name);
}

void Recorder::summarize() {
  std::lock_guard<std::mutex> lock(selection_mutex_);
  std::string text = "recorded " + std::to_string(written_) + " of " + std::to_string(seen_launches_) +
                     " launches in " + settings_.directory;
  if (unknown_launches_)
    text += " (" + std::to_string(unknown_launches_) + " launches of kernels the hook never saw registered)";
  wait_for_writer();
  if (failed_) text += "; " + std::to_string(failed_) + " could not be recorded";
  if (threads_refused_)
    text += "; " + std::to_string(threads_refused_) +
            " thread(s) could not be started (a thread limit: ulimit -u, a pids cgroup), their work done by fewer";
  kir_hook_stats stats{};
  stats.struct_size = sizeof stats;
  kir_hook_get_stats(&stats);
  if (stats.failures)
    text += "; the hook could not use " + std::to_string(stats.failures) + " item(s) (KIR_HOOK_LOG=1 names them)";
  if (settings_.verbose) {
    text += " [hook: " + std::to_string(stats.kernels) + " kernels, " + std::to_string(stats.launches) + " launches, " +
            std::to_string(stats.live_allocations) + " live allocations]";
  }
  say(text);
}

void Recorder::describe_kernel(RecordBuilder& b, const kir_hook_launch& l) {
  const kir_hook_kernel& k = *l.kernel;
  std::string name = k.name ? k.name : "";
  b.set_kernel(name, demangle(name), Hash128{k.static_hash.high, k.static_hash.low},
               std::vector<uint32_t>(k.param_offsets, k.param_offsets + k.param_count),
               std::vector<uint32_t>(k.param_sizes, k.param_sizes + k.param_count));
  kir_hook_code code{};
  if (kir_hook_kernel_code(&k, KIR_CODE_LAUNCHED, &code)) {
    (void)b.set_image(code.kind, code.arch, ByteView(static_cast<const uint8_t*>(code.bytes), code.size));
  } else {
    b.add_flag("no-layout", "the hook holds no device image for this kernel: its parameter layout is unknown");
  }
  kir_hook_code ptx{};
  if (kir_hook_kernel_code(&k, KIR_CODE_PTX, &ptx)) {
    ByteView text(static_cast<const uint8_t*>(ptx.bytes), ptx.size);
    (void)b.set_ptx(ptx.arch, text);
    std::string_view s(reinterpret_cast<const char*>(text.data()), text.size());
    for (const char* marker : {".texref", ".surfref", "tex.", "suld.", "sust."})
      if (s.find(marker) != std::string_view::npos) {
        b.add_flag("texture-or-surface", std::string("the kernel's PTX uses ") + marker);
        break;
      }
  }
  if (k.ir && k.ir_size) (void)b.set_ir(ByteView(static_cast<const uint8_t*>(k.ir), k.ir_size));
  if (uint32_t n = __atomic_load_n(&k.jit_arg_count, __ATOMIC_ACQUIRE))  // API 4: set once, then read-only
    b.set_jit_args(std::vector<kir_jit_arg>(k.jit_args, k.jit_args + n));
  // Relocatable device code: the linked image has no PTX; every unit's PTX, in
  // link order, lets replay link the kernel from PTX. Kept only when all have it.
  size_t units = kir_hook_kernel_code_units(&k);
  std::vector<kir_hook_code> unit_ptx(units);
  bool complete = units > 0;
  for (size_t i = 0; i < units && complete; ++i) complete = kir_hook_kernel_code_unit(&k, i, &unit_ptx[i]) == 1;
  if (complete)
    for (const kir_hook_code& u : unit_ptx)
      (void)b.add_ptx_unit(u.arch, ByteView(static_cast<const uint8_t*>(u.bytes), u.size));
}

void Recorder::flag_arguments(RecordBuilder& b, const std::vector<std::vector<uint8_t>>& args,
                              const std::vector<ModuleGlobal>& globals) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() != 8) continue;
    uint64_t v;
    std::memcpy(&v, args[i].data(), 8);
    if (!v) continue;
    std::string which = "argument " + std::to_string(i + 1) + " (" + hex(v) + ")";
    if (kir_hook_allocation a{}; kir_hook_find_allocation(v, &a)) {
      if (a.kind == KIR_ALLOC_HOST_PINNED) b.add_flag("host-pointer", which + " points into pinned host memory");
      continue;
    }
    bool in_global = false;
    for (const ModuleGlobal& g : globals) in_global |= v - g.address < g.size;
    if (in_global) {
      b.add_flag("global-pointer", which + " points into a module global, which moves between module loads");
      continue;
    }
    MemoryType type = kUnknownMemory;
    if (driver_->memory_type(v, type) != 0) continue;  // not a pointer the driver knows
    if (type == kHostMemory) b.add_flag("host-pointer", which + " points into host memory");
    else b.add_flag("unknown-pointer", which + " is device memory outside every tracked allocation");
  }
}

std::vector<size_t> Recorder::add_regions(RecordBuilder& b, const kir_hook_launch& l,
                                          const std::vector<std::vector<uint8_t>>& args) {
  std::vector<kir_hook_allocation> live = live_allocations();
  std::vector<ModuleGlobal> globals = module_globals(*l.kernel);
  flag_arguments(b, args, globals);
  std::vector<size_t> snapshot;
  for (const kir_hook_allocation& a : live) {
    bool in_range = va_ && va_->holds(a.address);
    size_t index = b.add_allocation(a.address, a.size, kind_name(a.kind), in_range);
    if (std::optional<Tolerance> t = annotation_of(a.address)) b.set_tolerance(index, std::move(*t));
    if (a.kind == KIR_ALLOC_HOST_PINNED) continue;
    snapshot.push_back(index);
  }
  for (const ModuleGlobal& g : globals) snapshot.push_back(b.add_global(g.name, g.address, g.size));
  return snapshot;
}

/// The prologue: every snapshotted region, or (--reachable) those reachable
/// from the arguments and the module's globals.
Status Recorder::snapshot_prologue(Pending& p, const std::vector<uint64_t>& roots) {
  RecordBuilder& b = *p.builder;
  if (!settings_.reachable) {
    p.prologue = snapshotter_->copy_on_device(b, p.snapshotted);
    return p.prologue ? Status() : snapshotter_->copy(b, p.snapshotted, false);
  }
  std::vector<MemoryRange> ranges;
  std::vector<uint64_t> all_roots = roots;
  for (size_t i : p.snapshotted) {
    const Region& r = b.regions()[i];
    ranges.push_back({r.address, r.size});
    if (r.global) all_roots.push_back(r.address);
  }
  std::vector<std::vector<uint8_t>> contents(ranges.size());
  Status failure;
  std::vector<size_t> reached = reachable_ranges(ranges, all_roots, [&](size_t i) {
    Expected<std::vector<uint8_t>> bytes = snapshotter_->read(ranges[i].address, ranges[i].size);
    if (bytes) contents[i] = std::move(*bytes);
    else failure = bytes.error();
    return ByteView(contents[i].data(), contents[i].size());
  });
  if (!failure) return failure;
  std::vector<size_t> kept;
  for (size_t i : reached) {
    size_t region = p.snapshotted[i];
    if (Status s = b.snapshot(region, false, 0, ByteView(contents[i].data(), contents[i].size()), settings_.threads);
        !s)
      return s;
    kept.push_back(region);
  }
  p.snapshotted = kept;
  return {};
}

/// One flag for the managed allocations, one for those outside the VA range.
void flag_regions(RecordBuilder& b) {
  size_t managed = 0, outside = 0;
  uint64_t first_managed = 0, first_outside = 0;
  for (const Region& r : b.regions()) {
    if (r.global) continue;
    if (r.kind == name(AllocationKind::managed) && !managed++) first_managed = r.address;
    if (r.kind != name(AllocationKind::host_pinned) && !r.in_va_range && !outside++) first_outside = r.address;
  }
  if (managed)
    b.add_flag("managed-memory",
               std::to_string(managed) + " managed allocation(s), the first at " + hex(first_managed));
  if (outside)
    b.add_flag("outside-va-range", std::to_string(outside) +
                                       " allocation(s) outside the reserved range, the first at " + hex(first_outside));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void Recorder::wait_for_writer() {
  std::lock_guard<std::mutex> lock(writer_mutex_);  // exit() on one thread while another records
  if (writer_.joinable()) writer_.join();
}

void Recorder::finish_record(Pending& p) {
  RecordBuilder& b = *p.builder;
  auto start = std::chrono::steady_clock::now();
  Status s;
  if (p.prologue) s = snapshotter_->store(b, p.snapshotted, false, *p.prologue);
  if (p.epilogue) {
    Status e = snapshotter_->store(b, p.snapshotted, true, *p.epilogue);
    if (s) s = e;
  }
  b.add_store_time(seconds_since(start));
  Expected<std::string> path = s ? b.write() : Expected<std::string>(s.error());
  if (!path) {
    say("cannot record " + p.label + ": " + path.error().message());
    ++failed_;
  } else {
    ++written_;
    if (settings_.verbose) say("recorded " + p.label + ": " + *path);
  }
  for (const Flag& f : b.flags())
    say("warning: " + p.label + " may not replay faithfully: " + f.flag + ": " + f.detail);
}

std::unique_ptr<Recorder::Pending> Recorder::begin_record(const kir_hook_launch& l, uint64_t ordinal) {
  wait_for_writer();  // the staging buffers and stream are free again
  if (!exit_hook_) {  // registered after the runtime's own exit handler, so it runs before it
    exit_hook_ = true;
    std::atexit([] { the_recorder->wait_for_writer(); });
  }
  auto p = std::make_unique<Pending>();
  p->builder = std::make_unique<RecordBuilder>(*store_, settings_.chunk_size);
  RecordBuilder& b = *p->builder;
  p->label = demangle(l.kernel->name ? l.kernel->name : "?") + " launch #" + std::to_string(ordinal);
  if (device_ < 0) {
    device_ = driver_->ensure_context();
    driver_->describe(device_, device_name_, device_arch_);
  }
  b.set_process(::getpid(), rank_);
  b.set_device(device_name_, device_arch_, device_);
  if (va_ && va_->holds(va_->base())) b.set_va_range(va_->base(), va_->size());
  describe_kernel(b, l);
  std::vector<std::vector<uint8_t>> args = argument_bytes(l);
  b.set_launch(l.api ? l.api : "", Hash128{l.launch_identity.high, l.launch_identity.low},
               {l.grid.x, l.grid.y, l.grid.z}, {l.block.x, l.block.y, l.block.z}, l.shared_bytes,
               reinterpret_cast<uintptr_t>(l.stream), args, ordinal);
  p->snapshotted = add_regions(b, l, args);
  flag_regions(b);
  driver_->synchronize();  // earlier work, on any stream, done
  auto start = std::chrono::steady_clock::now();
  if (Status s = snapshot_prologue(*p, pointer_candidates(args)); !s) {
    say("cannot record " + p->label + ": " + s.error().message());
    ++failed_;
    return nullptr;
  }
  b.add_time(false, seconds_since(start));
  return p;
}

void Recorder::launch_begin(const kir_hook_launch& l) {
  uint64_t ordinal = 0;
  if (!selected(l, ordinal)) return;
  crash::protect_this_thread();  // a stack overflow here still waits for the writer
  recording_mutex_.lock();       // released in launch_completed, on this thread
  pending_ = begin_record(l, ordinal);
  if (!pending_) recording_mutex_.unlock();
}

void Recorder::launch_completed(const kir_hook_launch& l) {
  if (!pending_) return;
  std::unique_ptr<Pending> p = std::move(pending_);
  RecordBuilder& b = *p->builder;
  if (l.result != 0) {
    say("not recorded: " + p->label + " failed to launch (error " + std::to_string(l.result) + ")");
    ++failed_;
  } else {
    driver_->synchronize();  // the kernel, and anything else in flight, done
    auto start = std::chrono::steady_clock::now();
    p->epilogue = snapshotter_->copy_on_device(b, p->snapshotted);
    Status s = p->epilogue ? Status() : snapshotter_->copy(b, p->snapshotted, true);
    b.add_time(true, seconds_since(start));
    if (!s) {
      say("cannot record " + p->label + ": " + s.error().message());
      ++failed_;
    } else {
      uintptr_t context = driver_->current();
      // Complete: from here a crash waits for the writer (crash_flush.hpp).
      crash::writer_begin();
      std::lock_guard<std::mutex> lock(writer_mutex_);
      std::shared_ptr<Pending> pending(std::move(p));
      try {
        writer_ = std::thread([this, context, pending] {
          crash::writer_thread();
          driver_->make_current(context);
          finish_record(*pending);
          crash::writer_end();  // on disk (or failed): a crash from here on need not wait
        });
      } catch (const std::system_error&) {
        // No thread to be had (a thread limit): this thread stores the record, the app waiting.
        ++threads_refused_;
        crash::writer_thread();
        finish_record(*pending);
        crash::writer_end();
      }
    }
  }
  recording_mutex_.unlock();
}

// ------------------------------------------------------------- the client

kir_hook_client make_client() {
  kir_hook_client c{};
  c.struct_size = sizeof c;
  c.api_version = KIR_HOOK_API_VERSION;
  // Told as each launch returns: the recorder synchronizes only the launches it
  // records (asking the hook to, with SYNCHRONIZE, would stall every launch).
  c.completion = KIR_COMPLETION_RETURNED;
  c.launch_begin = [](void*, const kir_hook_launch* l) { the_recorder->launch_begin(*l); };
  c.launch_completed = [](void*, const kir_hook_launch* l) { the_recorder->launch_completed(*l); };
  c.launch_skips = KIR_HOOK_SKIP_DEVICE;  // hook API 7: it reads its device itself, once
  return c;
}

kir_hook_allocator make_allocator() {
  kir_hook_allocator a{};
  a.struct_size = sizeof a;
  a.allocate = [](void*, uint64_t size, const void* stream, uint64_t* address) {
    return the_recorder->allocate(size, stream, address);
  };
  a.release = [](void*, uint64_t address, const void* stream) { return the_recorder->release(address, stream); };
  return a;
}

}  // namespace

}  // namespace kir::record

extern "C" KIR_EXPORT const kir_hook_client* kir_hook_client_entry(void) {
  using namespace kir::record;
  static kir_hook_client disabled = [] {
    kir_hook_client c{};
    c.struct_size = sizeof c;
    c.api_version = KIR_HOOK_API_VERSION;
    return c;
  }();
  static kir_hook_allocator allocator = make_allocator();
  static kir_hook_client client = make_client();
  if (the_recorder) return &client;
  int64_t rank = launcher_rank();
  if (!rank_selected(rank)) return &disabled;
  auto* recorder = new Recorder(Settings::from_environment());  // lives as long as the process
  if (!recorder->start()) return &disabled;
  the_recorder = recorder;
  // A crash finishes the records already complete, then the signal runs its course.
  if (!crash::install(crash::wait_from_environment())) say("warning: cannot install the crash handlers");
  std::atexit([] { the_recorder->summarize(); });
  client.allocator = &allocator;  // installed by the layer as it adds the client
  return &client;
}
