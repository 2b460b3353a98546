// The hook layer's registry, allocation tracker and client dispatch.
#include "layer.hpp"

#include "kir/discover.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/hash/kernel_code.hpp"
#include "kir/object/elf.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kir::hook {

namespace {

/// The fatbin container a `__fatBinC_Wrapper_t` points to, as a view of the app's memory.
std::optional<FatbinContainer> container_of(const void* wrapper) {
  Expected<FatbinContainer> c = registered_fatbin(wrapper);
  if (!c) return std::nullopt;
  return std::move(*c);
}

}  // namespace

Layer& Layer::get() {
  static Layer* layer = new Layer();  // never destroyed: the app may call in during exit
  return *layer;
}

Layer::Layer() { load_clients_from_environment(); }

void Layer::load_clients_from_environment() {
  const char* list = std::getenv("KIR_HOOK_CLIENTS");
  if (!list) return;
  std::string all(list);
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(':', start);
    std::string path = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? all.size() + 1 : end + 1;
    if (path.empty()) continue;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto entry = lib ? reinterpret_cast<const kir_hook_client* (*)()>(dlsym(lib, "kir_hook_client_entry"))
                     : nullptr;
    if (!entry) {
      std::fprintf(stderr, "kir-hook: cannot load client %s: %s\n", path.c_str(),
                   lib ? "no kir_hook_client_entry symbol" : dlerror());
      continue;
    }
    add_client(entry());
  }
}

int Layer::add_client(const kir_hook_client* client) {
  if (!client || client->struct_size < offsetof(kir_hook_client, fatbin_registered)) return -1;
  std::lock_guard<std::mutex> lock(clients_mutex_);
  size_t n = client_count_.load(std::memory_order_relaxed);
  if (n == kMaxClients) return -1;
  kir_hook_client& slot = clients_[n];  // fields a smaller (older) struct lacks stay zero
  std::memcpy(&slot, client, std::min<size_t>(client->struct_size, sizeof slot));
  client_count_.store(n + 1, std::memory_order_release);
  if (slot.allocator) install_allocator(slot.allocator);
  return 0;
}

template <class Fn>
void Layer::each_client(Fn&& fn) {
  size_t n = client_count_.load(std::memory_order_acquire);  // usually 0: nothing to do
  for (size_t i = 0; i < n; ++i) fn(clients_[i]);
}

void Layer::fatbin_registered(const void* handle, const void* wrapper) {
  auto record = std::make_unique<FatbinRecord>();
  record->handle = handle;
  record->container = container_of(wrapper);
  size_t images = record->container ? record->container->entries().size() : 0;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    fatbins_[handle] = std::move(record);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.fatbin_registered) c.fatbin_registered(c.user, handle, images);
  });
}

int device_compute_capability() {
  static const int cc = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return 0;
    auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(driver, "cuInit"));
    auto get = reinterpret_cast<int (*)(int*, int)>(dlsym(driver, "cuDeviceGet"));
    auto attribute = reinterpret_cast<int (*)(int*, int, int)>(dlsym(driver, "cuDeviceGetAttribute"));
    constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
    int device = 0, major = 0, minor = 0;
    if (!init || !get || !attribute || init(0) != 0 || get(&device, 0) != 0 ||
        attribute(&major, kMajor, device) != 0 || attribute(&minor, kMinor, device) != 0)
      return 0;
    return major * 10 + minor;
  }();
  return cc;
}

namespace {

/// How well fatbin entry `e` suits device `cc` (higher is better; 0: unusable):
/// its own cubin, then a compatible cubin (same major, lower minor), then PTX
/// the driver can JIT (arch <= device), the newest of each first.
int suitability(const FatbinEntry& e, int cc) {
  bool cubin = e.kind == uint16_t(FatbinEntryKind::cubin);
  int arch = int(e.arch);
  if (cubin && arch == cc) return 3000;
  if (cubin && arch / 10 == cc / 10 && arch < cc) return 2000 + arch;
  if (!cubin && arch <= cc) return 1000 + arch;
  return 0;
}

/// The image launches will use: KIR_HOOK_ARCH=sm_NN (`want`) when set; else the
/// one device `cc` would load (its cubin, a compatible cubin, or PTX); else (no
/// device, or none suits it) the cubin of the highest architecture, else PTX.
const FatbinEntry* pick_image(const FatbinContainer& container, const char* want, int cc) {
  const FatbinEntry* best = nullptr;
  int best_fit = 0;
  for (const FatbinEntry& e : container.entries()) {
    bool cubin = e.kind == uint16_t(FatbinEntryKind::cubin), ptx = e.kind == uint16_t(FatbinEntryKind::ptx);
    if ((!cubin && !ptx) || e.obfuscated()) continue;
    if (want && "sm_" + std::to_string(e.arch) != want) continue;
    if (cc) {
      int fit = suitability(e, cc);
      if (fit > best_fit) best = &e, best_fit = fit;
      continue;
    }
    bool better = !best || (cubin && best->kind != uint16_t(FatbinEntryKind::cubin)) ||
                  (e.kind == best->kind && e.arch > best->arch);
    if (better) best = &e;
  }
  return best || !cc ? best : pick_image(container, want, 0);
}

}  // namespace

void Layer::decode(FatbinRecord& f) {
  f.decoded = true;
  if (!f.container) return;
  const char* want = std::getenv("KIR_HOOK_ARCH");
  const FatbinEntry* best = pick_image(*f.container, want, want ? 0 : device_compute_capability());
  if (!best) return;
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(*best, scratch);
  if (!bytes) return;
  Expected<DeviceCode> code = best->kind == uint16_t(FatbinEntryKind::ptx) ? parse_ptx(*bytes) : parse_cubin(*bytes);
  if (!code) return;
  f.code = std::move(*code);
  f.code->image_digest = xxh3_128(*bytes);
  f.chosen = best;
  f.arch = "sm_" + std::to_string(best->arch);
}

void Layer::kernel_registered(const void* handle, const void* stub, const char* name) {
  FatbinRecord* fatbin = nullptr;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    auto f = fatbins_.find(handle);
    if (f != fatbins_.end()) {
      fatbin = f->second.get();
      if (!fatbin->decoded) decode(*fatbin);
    }
  }
  add_kernel(handle, stub, name, fatbin);
}

namespace {

/// The Proteus-embedded module for kernel `name` in `code`: the first of those
/// its static hash covers (kir/hash/kernel_code.hpp), or nullptr.
const EmbeddedModule* embedded_ir_of(const DeviceCode& code, const std::string& name) {
  KernelCode k = kernel_code(code, name);
  return k.kind == CodeKind::ir ? &code.ir[k.modules.front()] : nullptr;
}

}  // namespace

void Layer::add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin) {
  auto k = std::make_unique<KernelRecord>();
  k->name = name ? name : "";
  k->fatbin = fatbin;
  KernelRecord* record = k.get();
  if (fatbin && fatbin->code)
    for (const Kernel& kernel : fatbin->code->kernels)
      if (kernel.name == k->name)
        for (const KernelParam& p : kernel.params) {
          k->offsets.push_back(p.offset);
          k->sizes.push_back(p.size);
        }
  const EmbeddedModule* ir = fatbin && fatbin->code ? embedded_ir_of(*fatbin->code, k->name) : nullptr;
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
  std::optional<Hash128> known = fatbin && fatbin->code ? kernel_static_hash(*fatbin->code, k->name)
                                                        : std::nullopt;
  Hash128 h = known ? *known : static_hash(k->name, kir::name(CodeKind::unknown), {});
  v.static_hash = {h.high, h.low};
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    if (!kernels_.try_emplace(stub, std::move(k)).second) return;  // registered before: keep that one
    kernel_order_.push_back(record);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.kernel_registered) c.kernel_registered(c.user, &record->view);
  });
}

namespace {

/// The bytes of an image handed to cuModuleLoadData, sized from its own headers:
/// a fatbin container, an ELF cubin, or PTX text.
ByteView sized_image(const void* image) {
  Expected<ContainerSite> site = sized_device_image(image);
  return site ? ByteView(static_cast<const uint8_t*>(image), site->size) : ByteView();
}

}  // namespace

void Layer::module_loaded(const void* module, const void* image) {
  auto record = std::make_unique<FatbinRecord>();
  record->handle = module;
  ByteView bytes = sized_image(image);
  if (FatbinContainer::has_magic(bytes)) {
    if (Expected<FatbinContainer> c = FatbinContainer::create(bytes)) record->container = std::move(*c);
    decode(*record);
  } else if (!bytes.empty()) {
    record->decoded = true;
    bool elf = bytes.starts_with("\x7f" "ELF");
    Expected<DeviceCode> code = elf ? parse_cubin(bytes) : parse_ptx(bytes);
    if (code) {
      record->code = std::move(*code);
      record->code->image_digest = xxh3_128(bytes);
      record->launched_bytes.assign(bytes.data(), bytes.data() + bytes.size());  // the app may free its copy
      record->launched_ready = true;
    }
  }
  size_t images = record->container ? record->container->entries().size() : record->code ? 1 : 0;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    fatbins_[module] = std::move(record);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.fatbin_registered) c.fatbin_registered(c.user, module, images);
  });
}

void Layer::function_found(const void* module, const void* function, const char* name) {
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    if (kernels_.count(function)) return;  // looked up before
  }
  FatbinRecord* fatbin = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    auto f = fatbins_.find(module);
    if (f != fatbins_.end()) fatbin = f->second.get();
  }
  add_kernel(module, function, name, fatbin);
}

namespace {

/// The processor part of a bundle target ("gfx90a" of "gfx90a:xnack+").
std::string processor(const std::string& target) { return target.substr(0, target.find(':')); }

}  // namespace

void Layer::hip_fatbin_registered(const void* handle, const void* wrapper) {
  auto record = std::make_unique<FatbinRecord>();
  record->handle = handle;
  record->decoded = true;
  size_t images = 0;
  // The code object for KIR_HOOK_ARCH (a gfx processor), else the first one.
  if (Expected<ContainerSite> bundle = discover_registered_bundle(wrapper)) {
    const char* want = std::getenv("KIR_HOOK_ARCH");
    for (const Image& e : bundle->images) {
      if (e.kind == ImageKind::host || e.target.empty()) continue;
      ++images;
      if (record->code || (want && processor(e.target) != want)) continue;
      if (Expected<DeviceCode> code = parse_code_object(e.stored)) {
        record->code = std::move(*code);
        record->code->image_digest = xxh3_128(e.stored);
        record->arch = e.target;
      }
    }
  }
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    fatbins_[handle] = std::move(record);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.fatbin_registered) c.fatbin_registered(c.user, handle, images);
  });
}

size_t Layer::kernel_count() const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  return kernel_order_.size();
}

const kir_hook_kernel* Layer::kernel_at(size_t index) const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  return index < kernel_order_.size() ? &kernel_order_[index]->view : nullptr;
}

void Layer::global_registered(const void* handle, const void* host, const char* name, size_t size,
                              SymbolResolver resolve) {
  auto g = std::make_unique<GlobalRecord>();
  g->name = name ? name : "";
  g->view = {g->name.c_str(), host, size, handle};
  g->resolve = resolve;
  const kir_hook_global* view = &g->view;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    globals_by_host_[host] = g.get();
    globals_order_.push_back(std::move(g));
  }
  each_client([&](const kir_hook_client& c) {
    if (c.global_registered) c.global_registered(c.user, view);
  });
}

size_t Layer::global_count() const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  return globals_order_.size();
}

const kir_hook_global* Layer::global_at(size_t index) const {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  return index < globals_order_.size() ? &globals_order_[index]->view : nullptr;
}

uint64_t Layer::global_device_address(const void* host) {
  GlobalRecord* g = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    auto it = globals_by_host_.find(host);
    if (it != globals_by_host_.end()) g = it->second;
  }
  if (!g) return 0;
  if (uint64_t cached = g->device_address.load()) return cached;
  void* device = nullptr;
  RuntimeCall inside;  // the runtime's own work here is not the app's
  if (!g->resolve || g->resolve(&device, host) != 0) return 0;
  g->device_address = reinterpret_cast<uintptr_t>(device);
  return g->device_address;
}

void Layer::allocated(uint64_t address, uint64_t size, int kind) {
  kir_hook_allocation a{address, size, kind, nullptr};
  {
    std::unique_lock<std::shared_mutex> lock(allocations_mutex_);
    allocations_[address] = a;
  }
  each_client([&](const kir_hook_client& c) {
    if (c.allocated) c.allocated(c.user, &a);
  });
}

void Layer::freed(uint64_t address) {
  kir_hook_allocation a{};
  {
    std::unique_lock<std::shared_mutex> lock(allocations_mutex_);
    auto it = allocations_.find(address);
    if (it == allocations_.end()) return;
    a = it->second;
    allocations_.erase(it);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.freed) c.freed(c.user, &a);
  });
}

namespace {

/// The allocation of `map` (by start address) holding `address`, or nullptr.
template <class Map>
auto* holding(Map& map, uint64_t address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return static_cast<decltype(&it->second)>(nullptr);
  --it;
  return address - it->second.address < it->second.size ? &it->second : nullptr;
}

}  // namespace

bool Layer::find_allocation(uint64_t address, kir_hook_allocation& out) const {
  std::shared_lock<std::shared_mutex> lock(allocations_mutex_);
  const kir_hook_allocation* a = holding(allocations_, address);
  if (a) out = *a;
  return a != nullptr;
}

bool Layer::tag_allocation(uint64_t address, void* tag) {
  std::unique_lock<std::shared_mutex> lock(allocations_mutex_);
  kir_hook_allocation* a = holding(allocations_, address);
  if (a) a->tag = tag;
  return a != nullptr;
}

const kir_hook_kernel* Layer::kernel_view(const void* stub) {
  KernelRecord* k = kernel_for(stub);
  return k ? &k->view : nullptr;
}

void Layer::kernel_handle_found(const void* handle, const void* stub) {
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  stub_by_handle_[handle] = stub;
}

const void* Layer::stub_of_handle(const void* handle) const {
  if (client_count_.load(std::memory_order_acquire) == 0) return handle;  // no client asks which kernel it is
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  auto it = stub_by_handle_.find(handle);
  return it == stub_by_handle_.end() ? handle : it->second;
}

KernelRecord* Layer::kernel_for(const void* stub) {
  std::shared_lock<std::shared_mutex> lock(registry_mutex_);
  auto it = kernels_.find(stub);
  return it == kernels_.end() ? nullptr : it->second.get();
}

void Layer::launch_begin(kir_hook_launch& launch) {
  ++launches_;
  if (client_count_.load(std::memory_order_acquire) == 0) return;  // nobody to tell: skip the lookup and hash
  KernelRecord* k = kernel_for(launch.host_stub);
  launch.kernel = k ? &k->view : nullptr;
  if (k) {
    const std::string& arch = k->fatbin ? k->fatbin->arch : std::string();
    DynamicHash h({k->view.static_hash.high, k->view.static_hash.low}, arch);
    for (size_t i = 0; i < k->sizes.size() && launch.args; ++i)
      if (launch.args[i]) h.arg(uint32_t(i + 1), ArgType::bytes, launch.args[i], k->sizes[i]);
    h.grid(launch.grid.x, launch.grid.y, launch.grid.z).block(launch.block.x, launch.block.y, launch.block.z);
    Hash128 d = h.finish();
    launch.dynamic_hash = {d.high, d.low};
  }
  each_client([&](const kir_hook_client& c) {
    if (c.launch_begin) c.launch_begin(c.user, &launch);
  });
}

namespace {

/// A launch event kept until its stream reaches it: the client, the event, and
/// copies of the argument bytes (the app's own may be gone by then).
struct PendingCompletion {
  kir_hook_client client;
  kir_hook_launch launch;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<void*> args;

  PendingCompletion(const kir_hook_client& c, const kir_hook_launch& l) : client(c), launch(l) {
    const kir_hook_kernel* k = l.kernel;
    if (!k || !l.args) {
      launch.args = nullptr;
      return;
    }
    for (uint32_t i = 0; i < k->param_count; ++i) {
      const auto* from = static_cast<const uint8_t*>(l.args[i]);
      bytes.emplace_back(from, from + k->param_sizes[i]);
    }
    for (std::vector<uint8_t>& b : bytes) args.push_back(b.data());
    launch.args = args.data();
  }

  static void run(void* self) {
    std::unique_ptr<PendingCompletion> p(static_cast<PendingCompletion*>(self));
    p->client.launch_completed(p->client.user, &p->launch);
  }
};

}  // namespace

void Layer::launch_completed(const kir_hook_launch& launch, const StreamOps* ops) {
  bool synchronized = false;
  void* stream = const_cast<void*>(launch.stream);
  each_client([&](const kir_hook_client& c) {
    if (!c.launch_completed) return;
    int when = launch.result == 0 && ops ? c.completion : KIR_COMPLETION_RETURNED;
    if (when == KIR_COMPLETION_SYNCHRONIZE && !synchronized) {
      ops->synchronize(stream);
      synchronized = true;
    }
    if (when == KIR_COMPLETION_STREAM_ORDERED) {
      auto pending = std::make_unique<PendingCompletion>(c, launch);
      if (ops->enqueue_host(stream, &PendingCompletion::run, pending.get()) == 0) {
        pending.release();  // run() owns it now
        return;
      }
      ops->synchronize(stream);  // could not enqueue: wait instead, and report now
    }
    c.launch_completed(c.user, &launch);
  });
}

void Layer::stats(kir_hook_stats& out) const {
  kir_hook_stats s{};
  s.struct_size = sizeof s;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    s.fatbins = fatbins_.size();
    s.kernels = kernels_.size();
    s.globals = globals_order_.size();
  }
  {
    std::shared_lock<std::shared_mutex> lock(allocations_mutex_);
    s.live_allocations = allocations_.size();
  }
  s.launches = launches_;
  std::memcpy(&out, &s, std::min<size_t>(out.struct_size ? out.struct_size : sizeof s, sizeof s));
}

}  // namespace kir::hook

#define KIR_EXPORT __attribute__((visibility("default")))

extern "C" {

KIR_EXPORT int kir_hook_add_client(const kir_hook_client* client) {
  return kir::hook::Layer::get().add_client(client);
}

KIR_EXPORT int kir_hook_find_allocation(uint64_t address, kir_hook_allocation* out) {
  return out && kir::hook::Layer::get().find_allocation(address, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_global_count(void) { return kir::hook::Layer::get().global_count(); }
KIR_EXPORT const kir_hook_global* kir_hook_global_at(size_t index) {
  return kir::hook::Layer::get().global_at(index);
}
KIR_EXPORT uint64_t kir_hook_global_device_address(const void* host_address) {
  return kir::hook::Layer::get().global_device_address(host_address);
}

KIR_EXPORT int kir_hook_tag_allocation(uint64_t address, void* tag) {
  return kir::hook::Layer::get().tag_allocation(address, tag) ? 1 : 0;
}

KIR_EXPORT void kir_hook_track_allocation(uint64_t address, uint64_t size, int kind) {
  kir::hook::Layer::get().allocated(address, size, kind);
}

KIR_EXPORT void kir_hook_untrack_allocation(uint64_t address) { kir::hook::Layer::get().freed(address); }

KIR_EXPORT size_t kir_hook_kernel_count(void) { return kir::hook::Layer::get().kernel_count(); }

KIR_EXPORT const kir_hook_kernel* kir_hook_kernel_at(size_t index) {
  return kir::hook::Layer::get().kernel_at(index);
}

KIR_EXPORT void kir_hook_get_stats(kir_hook_stats* out) {
  if (out) kir::hook::Layer::get().stats(*out);
}

}  // extern "C"
