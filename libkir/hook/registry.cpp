// The hook layer's registry (registry.hpp).
#include "registry.hpp"

#include <algorithm>

#include "failure_log.hpp"
#include "kir/hash/kernel_code.hpp"
#include "runtime_call.hpp"

namespace kir::hook {

namespace {

/// Empty `v` and free its storage (`v = {}` assigns an empty list and keeps the capacity).
template <class T>
void release(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

/// Drop everything `f` holds of its image (no kir_hook_kernel_code is reading it:
/// under its code lock). Nothing of the image is kept (a process loading and
/// unloading modules must not grow): the code bytes handed out and the embedded
/// IR are freed (kir/hooks.h: valid until fatbin_unregistered returns); the
/// views keep their names and parameter layouts.
void drop_image(FatbinRecord& f) {
  std::lock_guard<std::mutex> code(f.code_mutex);
  f.unloaded = true;
  f.chosen = nullptr;
  f.container.reset();
  release(f.owned);
  release(f.launched_bytes);
  release(f.ptx_bytes);
  f.launched_ready = f.ptx_ready = false;
  release(f.units);
  if (f.code) {  // keeps its kind (an empty shell): nothing reads the rest again
    release(f.code->kernels);
    release(f.code->functions);
    release(f.code->globals);
    release(f.code->ir);
  }
  for (KernelRecord* k : f.kernels) {
    k->view.ir = nullptr;
    k->view.ir_size = 0;
  }
}

/// The Proteus-embedded module for kernel `name` in `code`: the first of those
/// its static hash covers (kir/hash/kernel_code.hpp), or nullptr.
const EmbeddedModule* embedded_ir_of(const DeviceCode& code, const std::string& name) {
  KernelCode k = kernel_code(code, name);
  return k.kind == CodeKind::ir ? &code.ir[k.modules.front()] : nullptr;
}

/// A new kernel record for `name` launched by `stub`, with its layout, IR and
/// static hash from `fatbin`'s decoded code; `found`: whether that code has it.
std::unique_ptr<KernelRecord> make_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin,
                                          bool& found) {
  auto k = std::make_unique<KernelRecord>();
  k->name = name ? name : "";
  k->fatbin = fatbin;
  const DeviceCode* code = fatbin && fatbin->code ? &*fatbin->code : nullptr;
  found = false;
  if (code)
    for (const Kernel& kernel : code->kernels)
      if (kernel.name == k->name) {
        found = true;
        for (const KernelParam& p : kernel.params) {
          k->offsets.push_back(p.offset);
          k->sizes.push_back(p.size);
        }
      }
  const EmbeddedModule* ir = code ? embedded_ir_of(*code, k->name) : nullptr;
  kir_hook_kernel& v = k->view;
  v.ir = ir ? ir->bitcode.data() : nullptr;
  v.ir_size = ir ? ir->bitcode.size() : 0;
  v.name = k->name.c_str();
  v.host_stub = stub;
  v.fatbin = handle;
  v.param_count = static_cast<uint32_t>(k->sizes.size());
  v.param_offsets = k->offsets.data();
  v.param_sizes = k->sizes.data();
  // The one static-hash policy (kir/hash/kernel_code.hpp), as `kir hash` applies it.
  std::optional<Hash128> known = code ? kernel_static_hash(*code, k->name) : std::nullopt;
  Hash128 h = known ? *known : static_hash(k->name, kir::name(CodeKind::unknown), {});
  v.static_hash = {h.high, h.low};
  v.struct_size = sizeof v;
  return k;
}

}  // namespace

bool Registry::holds_image(const void* handle, const uint8_t* data) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto live = fatbins_.find(handle);
  return live != fatbins_.end() && live->second->container && live->second->container->bytes().data() == data;
}

bool Registry::holds_wrapper(const void* handle, const void* wrapper) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto live = fatbins_.find(handle);
  return live != fatbins_.end() && wrapper && live->second->wrapper == wrapper;
}

const VendorTraits* Registry::traits_of(const void* handle) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto live = fatbins_.find(handle);
  return live == fatbins_.end() ? nullptr : live->second->traits;
}

void Registry::publish(const void* handle, std::unique_ptr<FatbinRecord> record) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  retire_locked(handle);  // registered again meanwhile, on another thread
  fatbins_[handle] = std::move(record);
}

std::optional<size_t> Registry::kernels_of(const void* handle) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  if (f == fatbins_.end()) return std::nullopt;
  return f->second->kernels.size();
}

bool Registry::retire(const void* handle) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  return retire_locked(handle);
}

bool Registry::retire_locked(const void* handle) {
  auto it = fatbins_.find(handle);
  if (it == fatbins_.end()) return false;
  FatbinRecord* f = it->second.get();
  for (KernelRecord* k : f->kernels) {
    __atomic_store_n(&k->view.unloaded, 1, __ATOMIC_RELEASE);
    auto live = kernels_.find(k->view.host_stub);
    if (live != kernels_.end() && live->second == k) kernels_.erase(live);
    for (const void* alias : k->aliases) {
      auto a = kernels_.find(alias);
      if (a != kernels_.end() && a->second == k) kernels_.erase(a);
    }
  }
  generation_.fetch_add(1, std::memory_order_release);  // per-thread lookups are stale now
  for (GlobalRecord* g : f->globals) {
    __atomic_store_n(&g->view.unloaded, 1, __ATOMIC_RELEASE);
    auto live = globals_by_host_.find(g->view.host_address);
    if (live != globals_by_host_.end() && live->second == g) globals_by_host_.erase(live);
  }
  drop_image(*f);
  retired_.push_back(std::move(it->second));
  fatbins_.erase(it);
  ++unregistered_;
  return true;
}

FatbinRecord* Registry::decoded_fatbin(const void* handle) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  if (f == fatbins_.end()) return nullptr;
  if (!f->second->decoded) decode_fatbin(*f->second, handle);
  return f->second.get();
}

FatbinRecord* Registry::fatbin(const void* handle) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  return f == fatbins_.end() ? nullptr : f->second.get();
}

const kir_hook_kernel* Registry::add_kernel(const void* handle, const void* stub, const char* name,
                                            FatbinRecord* fatbin) {
  bool found = false;
  std::unique_ptr<KernelRecord> k = make_kernel(handle, stub, name, fatbin, found);
  KernelRecord* record = k.get();
  {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (!kernels_.try_emplace(stub, record).second) return nullptr;  // registered before: keep that one
    generation_.fetch_add(1, std::memory_order_release);
    kernel_order_.push_back(std::move(k));
    auto f = fatbins_.find(handle);
    if (fatbin && (f == fatbins_.end() || f->second.get() != fatbin)) {  // unregistered meanwhile
      record->view.unloaded = 1;
      kernels_.erase(stub);
    } else if (fatbin) {
      fatbin->kernels.push_back(record);
    }
  }
  if (fatbin && fatbin->code && !found)
    report_failure(Failure::kernel, "kernel " + record->name,
                   describe("fatbin", handle) + ": not in the image the layer decoded (" + fatbin->arch +
                       "): its parameter layout is unknown");
  return &record->view;
}

bool Registry::has_kernel(const void* stub) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return kernels_.count(stub) != 0;
}

void Registry::alias(const void* alias, const void* of) {
  if (alias == of) return;
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = kernels_.find(of);
  if (it == kernels_.end()) return;
  if (kernels_.try_emplace(alias, it->second).second) {
    it->second->aliases.push_back(alias);
    generation_.fetch_add(1, std::memory_order_release);
  }
}

void Registry::kernel_handle_found(const void* handle, const void* stub) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  stub_by_handle_[handle] = stub;
}

const void* Registry::stub_of_handle(const void* handle) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = stub_by_handle_.find(handle);
  return it == stub_by_handle_.end() ? handle : it->second;
}

KernelRecord* Registry::kernel_for(const void* stub) {
  // This thread's recent answers first, valid while no kernel was registered,
  // unregistered or aliased since (issue 15: no lock, no hash-map probe per launch).
  struct Recent {
    uint64_t generation;
    const void* stub;
    KernelRecord* record;
  };
  static thread_local Recent recent[4];
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  Recent& slot = recent[(reinterpret_cast<uintptr_t>(stub) >> 4) & 3];
  if (slot.generation == generation && slot.stub == stub) return slot.record;
  KernelRecord* found;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = kernels_.find(stub);
    found = it == kernels_.end() ? nullptr : it->second;
  }
  slot = {generation, stub, found};  // a change since `generation` was read makes it stale at once
  return found;
}

FatbinRecord* Registry::live_fatbin_of(const kir_hook_kernel* kernel) {
  if (!kernel || __atomic_load_n(&kernel->unloaded, __ATOMIC_ACQUIRE)) return nullptr;
  KernelRecord* k = kernel_for(kernel->host_stub);
  return k && &k->view == kernel ? k->fatbin : nullptr;  // not a stale view of an earlier load
}

const kir_hook_kernel* Registry::set_jit_args(const void* stub, std::vector<kir_jit_arg> args) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = kernels_.find(stub);
  if (it == kernels_.end() || args.empty()) return nullptr;
  KernelRecord* k = it->second;
  if (__atomic_load_n(&k->view.jit_arg_count, __ATOMIC_ACQUIRE)) return nullptr;  // set once: clients may hold it
  std::sort(args.begin(), args.end(),
            [](const kir_jit_arg& a, const kir_jit_arg& b) { return a.position < b.position; });
  k->jit_args = std::move(args);
  k->view.jit_args = k->jit_args.data();
  __atomic_store_n(&k->view.jit_arg_count, uint32_t(k->jit_args.size()), __ATOMIC_RELEASE);
  return &k->view;
}

size_t Registry::kernel_count() const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return kernel_order_.size();
}

const kir_hook_kernel* Registry::kernel_at(size_t index) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return index < kernel_order_.size() ? &kernel_order_[index]->view : nullptr;
}

const kir_hook_global* Registry::add_global(const void* handle, const void* host, const char* name, size_t size,
                                            SymbolResolver resolve, bool& added) {
  auto g = std::make_unique<GlobalRecord>();
  g->name = name ? name : "";
  g->view = {g->name.c_str(), host, size, handle, 0, sizeof(kir_hook_global)};
  g->resolve = resolve;
  const kir_hook_global* view = &g->view;
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  auto known = globals_by_host_.find(host);
  added = !(known != globals_by_host_.end() && f != fatbins_.end() && known->second->view.fatbin == handle &&
            known->second->name == g->name);
  if (!added) return &known->second->view;  // the same registration's variable, noticed again
  if (f != fatbins_.end()) f->second->globals.push_back(g.get());
  globals_by_host_[host] = g.get();
  globals_order_.push_back(std::move(g));
  return view;
}

const kir_hook_global* Registry::add_module_global(const void* handle, const char* name, size_t size,
                                                   ModuleGlobalResolver resolve) {
  auto g = std::make_unique<GlobalRecord>();
  g->name = name ? name : "";
  g->view = {g->name.c_str(), &g->view, size, handle, 0, sizeof(kir_hook_global)};
  g->module_resolve = resolve;
  const kir_hook_global* view = &g->view;
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  if (f == fatbins_.end()) return nullptr;  // unloaded meanwhile
  f->second->globals.push_back(g.get());
  globals_by_host_[view] = g.get();
  globals_order_.push_back(std::move(g));
  return view;
}

size_t Registry::fatbin_globals(const void* handle, const kir_hook_global** out, size_t capacity) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto f = fatbins_.find(handle);
  if (f == fatbins_.end()) return 0;
  const std::vector<GlobalRecord*>& globals = f->second->globals;
  for (size_t i = 0; out && i < globals.size() && i < capacity; ++i) out[i] = &globals[i]->view;
  return globals.size();
}

size_t Registry::global_count() const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return globals_order_.size();
}

const kir_hook_global* Registry::global_at(size_t index) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return index < globals_order_.size() ? &globals_order_[index]->view : nullptr;
}

uint64_t Registry::global_device_address(const void* host) {
  GlobalRecord* g = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = globals_by_host_.find(host);
    if (it != globals_by_host_.end()) g = it->second;
  }
  if (!g) return 0;
  if (uint64_t cached = g->device_address.load()) return cached;
  void* device = nullptr;
  RuntimeCall inside;  // the runtime's own work here is not the app's
  if (g->module_resolve) {
    uint64_t address = 0;
    size_t bytes = 0;
    if (g->module_resolve(&address, &bytes, g->view.fatbin, g->name.c_str()) != 0) return 0;
    return g->device_address = address;
  }
  if (!g->resolve || g->resolve(&device, host) != 0) return 0;
  g->device_address = reinterpret_cast<uintptr_t>(device);
  return g->device_address;
}

void Registry::counts(kir_hook_stats& s) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  s.fatbins = fatbins_.size();
  s.kernels = kernels_.size();
  s.globals = globals_by_host_.size();
  s.unregistered = unregistered_;
}

}  // namespace kir::hook
