// The hook layer's registry, allocation tracker and client dispatch.
#include "layer.hpp"
#include "settings.hpp"

#include "kir/discover.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/hash/kernel_code.hpp"
#include "kir/object/elf.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kir::hook {

namespace {

/// The bytes from `p` to the end of the loaded ELF segment holding it — where a
/// registered fatbin or bundle lies, in the app's own image — so that damaged
/// headers meet the segment's end, not unmapped memory; kUnknownSize when no
/// loaded object holds `p` (a buffer the app allocated).
uint64_t mapped_extent(const void* p) {
  struct Search {
    uintptr_t at;
    uint64_t extent;
  } search{reinterpret_cast<uintptr_t>(p), kUnknownSize};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->at >= start && s->at - start < ph.p_memsz) {
            s->extent = ph.p_memsz - (s->at - start);
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.extent;
}

std::string hex_of(const void* p) { return hex(reinterpret_cast<uintptr_t>(p)); }

/// The fatbin container a `__fatBinC_Wrapper_t` points to, as a view of the app's
/// memory, sized from its own header (kir/discover.hpp) and read no further
/// than the loaded segment holding it.
Expected<FatbinContainer> container_of(const void* wrapper) {
  return registered_fatbin(wrapper, kUnknownSize, mapped_extent);
}

/// The most relocatable units a device-linked registration may list.
constexpr size_t kMaxLinkedUnits = 4096;

/// A device-linked registration's units (nvcc -rdc=true): __cudaRegisterLinkedBinary
/// registers the linked fatbin with a version-2 `__fatBinC_Wrapper_t` whose last
/// field points to a NULL-terminated array of the units' relocatable fatbin
/// containers (crt/link.stub, `__cudaPrelinkedFatbins`). Each is read no
/// further than its loaded segment; one that cannot be read is reported and
/// kept as an empty unit, so indices stay those of the link order.
std::vector<FatbinRecord::Unit> linked_units(const void* wrapper, const void* handle) {
  std::vector<FatbinRecord::Unit> units;
  constexpr size_t kVersionAt = 4, kListAt = 16, kWrapperBytes = 24;
  if (!wrapper || mapped_extent(wrapper) < kWrapperBytes) return units;
  int32_t version = 0;
  const void* list = nullptr;
  std::memcpy(&version, static_cast<const uint8_t*>(wrapper) + kVersionAt, sizeof version);
  std::memcpy(&list, static_cast<const uint8_t*>(wrapper) + kListAt, sizeof list);
  if (version != 2 || !list) return units;
  const auto* slots = static_cast<const uint8_t*>(list);
  for (size_t i = 0;; ++i) {
    if (i == kMaxLinkedUnits) {
      report_failure(describe("fatbin", handle), "its list of linked units at " + hex_of(list) + " holds more than " +
                                                     std::to_string(kMaxLinkedUnits) + " entries: the rest are ignored");
      break;
    }
    const uint8_t* slot = slots + i * sizeof(void*);
    if (mapped_extent(slot) < sizeof(void*)) {
      report_failure(describe("fatbin", handle), "its list of linked units at " + hex_of(list) + " ends at entry " +
                                                     std::to_string(i) + " without a NULL");
      break;
    }
    const void* unit = nullptr;
    std::memcpy(&unit, slot, sizeof unit);
    if (!unit) break;
    FatbinRecord::Unit u;
    Expected<FatbinContainer> c =
        FatbinContainer::create(ByteView(static_cast<const uint8_t*>(unit), std::min(kUnknownSize, mapped_extent(unit))));
    if (c) u.container = std::move(*c);
    else report_failure(describe("fatbin", handle), "linked unit " + std::to_string(i) + " at " + hex_of(unit) + ": " +
                                                        c.error().message());
    units.push_back(std::move(u));
  }
  return units;
}

struct FailureLog {
  std::atomic<uint64_t> count{0};
  std::mutex mutex;
  FILE* file = nullptr;  // KIR_HOOK_LOG: "1" stderr, else a path; unset or "0": no lines

  FailureLog() {
    const char* where = setting("KIR_HOOK_LOG");
    if (!where || !*where || std::strcmp(where, "0") == 0) return;
    file = std::strcmp(where, "1") == 0 ? stderr : std::fopen(where, "a");
    if (!file) {
      std::fprintf(stderr, "kir-hook: error: KIR_HOOK_LOG: cannot open %s: %s; logging to stderr\n", where,
                   std::strerror(errno));
      file = stderr;
    }
  }
};

FailureLog& failure_log() {
  static FailureLog* log = new FailureLog();  // never destroyed: failures may come during exit
  return *log;
}

}  // namespace

void report_failure(const std::string& what, const std::string& detail, bool always) {
  FailureLog& log = failure_log();
  ++log.count;
  if (!log.file && !always) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  std::fprintf(log.file ? log.file : stderr, "kir-hook: error: %s: %s\n", what.c_str(), detail.c_str());
  std::fflush(log.file ? log.file : stderr);
}

uint64_t failure_count() { return failure_log().count.load(); }

std::string describe(const char* noun, const void* handle) { return std::string(noun) + " " + hex_of(handle); }

Layer& Layer::get() {
  static Layer* layer = new Layer();  // never destroyed: the app may call in during exit
  if (!layer->clients_loaded_.load(std::memory_order_acquire)) layer->load_clients();
  return *layer;
}

void Layer::load_clients() {
  static thread_local bool loading = false;  // this thread is loading them: entered again from a dlopen
  if (loading) return;
  std::lock_guard<std::mutex> lock(clients_loading_);
  if (clients_loaded_.load(std::memory_order_relaxed)) return;  // another thread loaded them meanwhile
  loading = true;
  load_clients_from_environment();
  loading = false;
  clients_loaded_.store(true, std::memory_order_release);
}

void Layer::load_clients_from_environment() {
  const char* list = setting("KIR_HOOK_CLIENTS");  // nullptr in a setuid process: no clients
  if (!list) return;
  std::string all(list);
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(':', start);
    std::string path = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? all.size() + 1 : end + 1;
    if (path.empty()) continue;
    // Printed whether or not KIR_HOOK_LOG is set: the user asked for this client.
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto entry = lib ? reinterpret_cast<const kir_hook_client* (*)()>(dlsym(lib, "kir_hook_client_entry"))
                     : nullptr;
    if (!entry) {
      report_failure("client " + path, lib ? "no kir_hook_client_entry symbol" : dlerror(), true);
      continue;
    }
    const kir_hook_client* client = entry();
    if (add_client(client) != 0)
      report_failure("client " + path,
                     !client ? "kir_hook_client_entry returned NULL"
                     : client->struct_size < offsetof(kir_hook_client, fatbin_registered)
                         ? "struct_size " + std::to_string(client->struct_size) + " is too small"
                         : "the client table is full (" + std::to_string(kMaxClients) + " clients)",
                     true);
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
  if (slot.launch_override) has_override_.store(true, std::memory_order_release);
  // What the launch path must compute for this client (API 5; older clients: everything).
  uint32_t skips = client->struct_size < offsetof(kir_hook_client, launch_skips) + sizeof(uint32_t)
                       ? 0u : client->launch_skips;
  if (skips & KIR_HOOK_SKIP_KERNEL) skips |= KIR_HOOK_SKIP_IDENTITY;
  uint32_t needs = 0;
  if (!(skips & KIR_HOOK_SKIP_KERNEL)) needs |= kNeedsKernel;
  if (!(skips & KIR_HOOK_SKIP_IDENTITY)) needs |= kNeedsIdentity;
  if (!slot.launch_begin && !slot.launch_completed && !slot.launch_override) needs = 0;  // never sees a launch
  launch_needs_.fetch_or(needs, std::memory_order_release);
  return 0;
}

template <class Fn>
void Layer::each_client(Fn&& fn) {
  size_t n = client_count_.load(std::memory_order_acquire);  // usually 0: nothing to do
  for (size_t i = 0; i < n; ++i) fn(clients_[i]);
}

void Layer::fatbin_registered(const void* handle, const void* wrapper) {
  auto record = std::make_unique<FatbinRecord>();
  Expected<FatbinContainer> c = container_of(wrapper);
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    auto live = fatbins_.find(handle);
    if (c && live != fatbins_.end() && live->second->container &&
        live->second->container->bytes().data() == c->bytes().data())
      return;  // registered again (Proteus's __proteus_register_fatbinary after the runtime's): the same image
  }
  if (c) {
    record->container = std::move(*c);
    record->units = linked_units(wrapper, handle);
  } else {
    report_failure(describe("fatbin", handle), "registered without its code: " + c.error().message());
  }
  size_t images = record->container ? record->container->entries().size() : 0;
  publish(handle, std::move(record), images);
}

void Layer::publish(const void* handle, std::unique_ptr<FatbinRecord> record, size_t images) {
  fatbin_unregistered(handle, nullptr);  // a live handle reused without our seeing it unregistered
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    if (retire(handle)) ++unregistered_;  // registered again meanwhile, on another thread
    fatbins_[handle] = std::move(record);
  }
  each_client([&](const kir_hook_client& c) {
    if (c.fatbin_registered) c.fatbin_registered(c.user, handle, images);
  });
}

void Layer::fatbin_unregistered(const void* handle, const char* api) {
  size_t kernels = 0;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    auto f = fatbins_.find(handle);
    if (f == fatbins_.end()) {
      if (api) report_failure(describe(api, handle), "a handle the layer never saw registered");
      return;
    }
    kernels = f->second->kernels.size();
  }
  // Clients first: the image is still mapped and kir_hook_kernel_code still answers.
  each_client([&](const kir_hook_client& c) {
    if (c.fatbin_unregistered) c.fatbin_unregistered(c.user, handle, kernels);
  });
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  if (retire(handle)) ++unregistered_;
}

namespace {

/// Empty `v` and free its storage (`v = {}` assigns an empty list and keeps the capacity).
template <class T>
void release(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

}  // namespace

bool Layer::retire(const void* handle) {
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
  kernels_generation_.fetch_add(1, std::memory_order_release);  // per-thread lookups are stale now
  for (GlobalRecord* g : f->globals) {
    __atomic_store_n(&g->view.unloaded, 1, __ATOMIC_RELEASE);
    auto live = globals_by_host_.find(g->view.host_address);
    if (live != globals_by_host_.end() && live->second == g) globals_by_host_.erase(live);
  }
  {
    std::lock_guard<std::mutex> code(f->code_mutex);  // no kir_hook_kernel_code is reading the image now
    f->unloaded = true;
    f->chosen = nullptr;
    f->container.reset();
    release(f->owned);
    // Nothing of the image is kept (a process loading and unloading modules
    // must not grow): the code bytes handed out and the embedded IR are freed
    // (kir/hooks.h: valid until fatbin_unregistered returns); the views keep
    // their names and parameter layouts.
    release(f->launched_bytes);
    release(f->ptx_bytes);
    f->launched_ready = f->ptx_ready = false;
    release(f->units);
    if (f->code) {  // keeps its kind (an empty shell): nothing reads the rest again
      release(f->code->kernels);
      release(f->code->functions);
      release(f->code->globals);
      release(f->code->ir);
    }
    for (KernelRecord* k : f->kernels) {
      k->view.ir = nullptr;
      k->view.ir_size = 0;
    }
  }
  retired_.push_back(std::move(it->second));
  fatbins_.erase(it);
  return true;
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

void Layer::decode(FatbinRecord& f, const void* handle) {
  f.decoded = true;
  if (!f.container) return;  // reported when it was registered
  const char* want = setting("KIR_HOOK_ARCH");
  const FatbinEntry* best = pick_image(*f.container, want, want ? 0 : device_compute_capability());
  if (!best) {
    report_failure(describe("fatbin", handle),
                   "no cubin or PTX image" + (want ? " for KIR_HOOK_ARCH=" + std::string(want) : std::string()) +
                       " among its " + std::to_string(f.container->entries().size()) +
                       " entries: its kernels' layouts are unknown");
    return;
  }
  bool ptx = best->kind == uint16_t(FatbinEntryKind::ptx);
  std::string which = std::string(name(ptx ? ImageKind::ptx : ImageKind::cubin)) + " sm_" + std::to_string(best->arch);
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(*best, scratch);
  if (!bytes) {
    report_failure(describe("fatbin", handle), which + ": " + bytes.error().message());
    return;
  }
  Expected<DeviceCode> code = ptx ? parse_ptx(*bytes) : parse_cubin(*bytes);
  if (!code) {
    report_failure(describe("fatbin", handle), which + ": " + code.error().message());
    return;
  }
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
      if (!fatbin->decoded) decode(*fatbin, handle);
    }
  }
  if (!fatbin)
    report_failure("kernel " + std::string(name ? name : ""), describe("fatbin", handle) + " was never registered");
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
  bool found = false;
  if (fatbin && fatbin->code)
    for (const Kernel& kernel : fatbin->code->kernels)
      if (kernel.name == k->name) {
        found = true;
        for (const KernelParam& p : kernel.params) {
          k->offsets.push_back(p.offset);
          k->sizes.push_back(p.size);
        }
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
    if (!kernels_.try_emplace(stub, record).second) return;  // registered before: keep that one
    kernels_generation_.fetch_add(1, std::memory_order_release);
    kernel_order_.push_back(std::move(k));
    auto f = fatbins_.find(handle);
    if (fatbin && (f == fatbins_.end() || f->second.get() != fatbin)) {  // unregistered meanwhile
      v.unloaded = 1;
      kernels_.erase(stub);
    } else if (fatbin) {
      fatbin->kernels.push_back(record);
    }
  }
  if (fatbin && fatbin->code && !found)
    report_failure("kernel " + record->name, describe("fatbin", handle) + ": not in the image the layer decoded (" +
                                                 fatbin->arch + "): its parameter layout is unknown");
  each_client([&](const kir_hook_client& c) {
    if (c.kernel_registered) c.kernel_registered(c.user, &record->view);
  });
}

namespace {

/// The bytes of an image handed to cuModuleLoadData, sized from its own headers:
/// a fatbin container (or the `__fatBinC_Wrapper_t` pointing to one, as a
/// statically linked runtime passes it), an ELF cubin, or PTX text.
Expected<ByteView> sized_image(const void* image) {
  uint32_t magic = 0;
  if (image) std::memcpy(&magic, image, sizeof magic);
  if (magic == kFatbinWrapperMagic) {  // a static runtime hands the driver its __fatBinC_Wrapper_t
    Expected<FatbinContainer> c = registered_fatbin(image, kUnknownSize, mapped_extent);
    if (!c) return c.error();
    return c->bytes();
  }
  Expected<ContainerSite> site = sized_device_image(image, image ? mapped_extent(image) : 0);
  if (!site) return site.error().within("image at " + hex_of(image));
  return ByteView(static_cast<const uint8_t*>(image), site->size);
}

}  // namespace

void Layer::module_loaded(const void* module, const void* image) {
  auto record = std::make_unique<FatbinRecord>();
  std::string what = describe("module", module);
  Expected<ByteView> sized = sized_image(image);
  ByteView bytes = sized ? *sized : ByteView();
  if (!sized) report_failure(what, "not recorded with its code: " + sized.error().message());
  if (FatbinContainer::has_magic(bytes)) {
    record->owned.assign(bytes.data(), bytes.data() + bytes.size());  // the app may free its copy
    if (Expected<FatbinContainer> c = FatbinContainer::create(ByteView(record->owned.data(), record->owned.size())))
      record->container = std::move(*c);
    decode(*record, module);
  } else if (!bytes.empty()) {
    record->decoded = true;
    bool elf = bytes.starts_with("\x7f" "ELF");
    Expected<DeviceCode> code = elf ? parse_cubin(bytes) : parse_ptx(bytes);
    if (code) {
      record->code = std::move(*code);
      record->code->image_digest = xxh3_128(bytes);
      record->launched_bytes.assign(bytes.data(), bytes.data() + bytes.size());  // the app may free its copy
      record->launched_ready = true;
    } else {
      report_failure(what, std::string(elf ? "cubin: " : "PTX: ") + code.error().message());
    }
  }
  size_t images = record->container ? record->container->entries().size() : record->code ? 1 : 0;
  publish(module, std::move(record), images);
}

void Layer::function_alias(const void* alias, const void* of) {
  if (alias == of) return;
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  auto it = kernels_.find(of);
  if (it == kernels_.end()) return;
  if (kernels_.try_emplace(alias, it->second).second) {
    it->second->aliases.push_back(alias);
    kernels_generation_.fetch_add(1, std::memory_order_release);
  }
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
  record->decoded = true;
  std::string what = describe("HIP fatbin", handle);
  size_t images = 0;
  // The code object for KIR_HOOK_ARCH (a gfx processor), else the first one.
  const char* want = setting("KIR_HOOK_ARCH");
  Expected<ContainerSite> b = discover_registered_bundle(wrapper, kUnknownSize, mapped_extent);
  if (!b) report_failure(what, "registered without its code: " + b.error().message());
  else
    for (const Image& e : b->images) {
      if (e.kind == ImageKind::host || e.target.empty()) continue;
      ++images;
      if (record->code || (want && processor(e.target) != want)) continue;
      if (Expected<DeviceCode> code = parse_code_object(e.stored)) {
        record->code = std::move(*code);
        record->code->image_digest = xxh3_128(e.stored);
        record->arch = e.target;
      } else {
        report_failure(what, "code object " + e.id + ": " + code.error().message());
      }
    }
  if (b && !record->code && images)
    report_failure(what, std::string("no code object could be used") +
                             (want ? " for KIR_HOOK_ARCH=" + std::string(want) : std::string()) + " among its " +
                             std::to_string(images) + ": its kernels' layouts are unknown");
  publish(handle, std::move(record), images);
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
  g->view = {g->name.c_str(), host, size, handle, 0};
  g->resolve = resolve;
  const kir_hook_global* view = &g->view;
  {
    std::unique_lock<std::shared_mutex> lock(registry_mutex_);
    auto f = fatbins_.find(handle);
    if (f != fatbins_.end()) f->second->globals.push_back(g.get());
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
  // This thread's recent answers first, valid while no kernel was registered,
  // unregistered or aliased since (issue 15: no lock, no hash-map probe per launch).
  struct Recent {
    uint64_t generation;
    const void* stub;
    KernelRecord* record;
  };
  static thread_local Recent recent[4];
  const uint64_t generation = kernels_generation_.load(std::memory_order_acquire);
  Recent& slot = recent[(reinterpret_cast<uintptr_t>(stub) >> 4) & 3];
  if (slot.generation == generation && slot.stub == stub) return slot.record;
  KernelRecord* found;
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    auto it = kernels_.find(stub);
    found = it == kernels_.end() ? nullptr : it->second;
  }
  slot = {generation, stub, found};  // a change since `generation` was read makes it stale at once
  return found;
}

void Layer::launch_begin(kir_hook_launch& launch, Claim* claim, Vendor vendor) {
  Counts::add(kLaunches);  // the interposers call this only with a client loaded (else count_launch)
  const uint32_t needs = launch_needs_.load(std::memory_order_acquire);
  KernelRecord* k = needs & kNeedsKernel ? kernel_for(launch.host_stub) : nullptr;
  launch.kernel = k ? &k->view : nullptr;
  if (k && (needs & kNeedsIdentity)) {  // only when a client reads it (API 5)
    static const std::string kNoArch;
    const std::string& arch = k->fatbin ? k->fatbin->arch : kNoArch;
    const KernelRecord::IdentityPrefix* prefix = k->identity_prefix.load(std::memory_order_acquire);
    if (!prefix || prefix->arch != arch) {  // the first launch (or the image's arch changed)
      auto* fresh = new KernelRecord::IdentityPrefix{
          arch, std::string(DynamicHash(HashDomain::launch_identity,
                                        {k->view.static_hash.high, k->view.static_hash.low}, arch).encoded())};
      if (k->identity_prefix.compare_exchange_strong(prefix, fresh, std::memory_order_acq_rel))
        prefix = fresh;  // the one it replaced (if any) stays allocated: another launch may hold it
      else
        delete fresh;  // another thread's is in place: `prefix` holds it now
    }
    if (prefix->arch != arch)  // lost a race with an arch change: encode this one in full
      prefix = nullptr;
    const uint32_t grid[3] = {launch.grid.x, launch.grid.y, launch.grid.z};
    const uint32_t block[3] = {launch.block.x, launch.block.y, launch.block.z};
    Hash128 d = prefix ? kir::launch_identity_from(prefix->bytes, launch.args, k->sizes.data(),
                                                   uint32_t(k->sizes.size()), grid, block, launch.shared_bytes)
                       : kir::launch_identity({k->view.static_hash.high, k->view.static_hash.low}, arch, launch.args,
                                              k->sizes.data(), uint32_t(k->sizes.size()), grid, block,
                                              launch.shared_bytes);
    launch.launch_identity = {d.high, d.low};
  }
  if (claim && overriding()) {
    size_t n = client_count_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      const kir_hook_client& c = clients_[i];
      if (!c.launch_override) continue;
      kir_hook_substitute sub{};
      sub.struct_size = sizeof sub;
      if (c.launch_override(c.user, &launch, &sub) != 1) continue;
      claim->client = int(i);
      claim->sub = sub;
      launch.claimed_by = int(i);
      launch.substitute_id = sub.id;
      if (sub.kind == KIR_SUBSTITUTE_HANDLED) {
        launch.outcome = KIR_LAUNCH_HANDLED;
        Counts::add(kHandled);
      } else if ((claim->function = substitute_function(launch, *claim, vendor))) {
        launch.outcome = KIR_LAUNCH_SUBSTITUTED;
        Counts::add(kSubstituted);
      } else {
        Counts::add(kSubstituteFailures);  // reported by substitute_function; the original runs
      }
      break;  // the first claimer wins
    }
  }
  each_client([&](const kir_hook_client& c) {
    if (c.launch_begin) c.launch_begin(c.user, &launch);
  });
}

void Layer::set_jit_args(const void* stub, std::vector<kir_jit_arg> args) {
  std::unique_lock<std::shared_mutex> lock(registry_mutex_);
  auto it = kernels_.find(stub);
  if (it == kernels_.end() || args.empty()) return;
  KernelRecord* k = it->second;
  if (__atomic_load_n(&k->view.jit_arg_count, __ATOMIC_ACQUIRE)) return;  // set once: clients may hold the pointer
  std::sort(args.begin(), args.end(), [](const kir_jit_arg& a, const kir_jit_arg& b) { return a.position < b.position; });
  k->jit_args = std::move(args);
  k->view.jit_args = k->jit_args.data();
  __atomic_store_n(&k->view.jit_arg_count, uint32_t(k->jit_args.size()), __ATOMIC_RELEASE);
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
  size_t size = std::min<size_t>(out.struct_size ? out.struct_size : sizeof s, sizeof s);
  s.struct_size = uint32_t(size);
  {
    std::shared_lock<std::shared_mutex> lock(registry_mutex_);
    s.fatbins = fatbins_.size();
    s.kernels = kernels_.size();
    s.globals = globals_by_host_.size();
  }
  s.failures = failure_count();
  s.unregistered = unregistered_;
  s.handled = Counts::sum(kHandled);
  s.substituted = Counts::sum(kSubstituted);
  s.substitute_loads = substitute_loads_;
  s.substitute_failures = Counts::sum(kSubstituteFailures);
  {
    std::shared_lock<std::shared_mutex> lock(allocations_mutex_);
    s.live_allocations = allocations_.size();
  }
  s.launches = Counts::sum(kLaunches);
  std::memcpy(&out, &s, size);
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
  if (kind < KIR_ALLOC_DEVICE || kind > KIR_ALLOC_HOST_PINNED)  // tracked all the same: the memory exists
    kir::hook::report_failure("kir_hook_track_allocation " + kir::hex(address),
                              "kind " + std::to_string(kind) + " is not a KIR_ALLOC_* value");
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
