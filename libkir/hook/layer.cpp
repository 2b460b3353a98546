// The hook layer (layer.hpp): events from the interposers, through the
// registry, the allocation tracker and the client table, to the clients.
#include "layer.hpp"

#include <cstring>

#include "kir/hash/hash.hpp"

namespace kir::hook {

Layer& Layer::get() {
  static Layer* layer = new Layer();  // never destroyed: the app may call in during exit
  if (!layer->loader_.loaded())
    layer->loader_.load([](const std::string& path, const kir_hook_client* c) { layer->add_client(c, &path); });
  return *layer;
}

int Layer::add_client(const kir_hook_client* client, const std::string* source) {
  const kir_hook_client* slot = nullptr;
  ClientTable::Added added = clients_.add(client, &slot);
  if (added == ClientTable::Added::added) {
    if (slot->allocator) allocations_.set_allocator(slot->allocator);
    return 0;
  }
  // A client too new for this layer is always reported; other refusals of a
  // linked client's kir_hook_add_client only return -1, as they always did.
  Failure kind = added == ClientTable::Added::too_new ? Failure::client_api : Failure::client;
  if (source || kind == Failure::client_api)
    report_failure(kind, source ? "client " + *source : std::string("kir_hook_add_client"),
                   ClientTable::refusal(added, client), true);
  return -1;
}

void Layer::fatbin_registered(const void* handle, const void* wrapper, Vendor vendor) {
  const VendorTraits& t = traits(vendor);
  size_t images = 0;
  std::unique_ptr<FatbinRecord> record = t.read_registration(handle, wrapper, registry_, images);
  if (!record) return;
  record->traits = &t;
  record->wrapper = wrapper;
  latest_traits_.store(&t, std::memory_order_relaxed);
  publish(handle, std::move(record), images);
}

void Layer::fatbin_noticed(const void* handle, const void* wrapper, const char* api) {
  if (registry_.holds_wrapper(handle, wrapper)) return;  // the runtime's registration, seen already
  const bool live = registry_.fatbin(handle) != nullptr;
  const char* kept = live ? ": the live registration is kept" : "";
  const VendorTraits* t = traits_of_wrapper(wrapper);
  if (!t) {
    uint32_t magic = 0;
    if (wrapper && mapped_extent(wrapper) >= sizeof magic) std::memcpy(&magic, wrapper, sizeof magic);
    report_failure(Failure::registration, describe(api, handle),
                   "its wrapper at " + hex(reinterpret_cast<uintptr_t>(wrapper)) + " starts with " + hex(magic) +
                       ", neither CUDA's magic " + hex(kFatbinWrapperMagic) + " nor HIP's " + hex(kHipWrapperMagic) +
                       kept);
    return;
  }
  size_t images = 0;
  std::unique_ptr<FatbinRecord> record = t->read_registration(handle, wrapper, registry_, images);
  if (!record) return;                                      // the live registration's image (CUDA)
  if (live && !record->container && !record->code) return;  // unreadable (a failure, reported): keep the live one
  record->traits = t;
  record->wrapper = wrapper;
  latest_traits_.store(t, std::memory_order_relaxed);
  publish(handle, std::move(record), images);
}

const VendorTraits& Layer::traits_of_handle(const void* handle) const {
  if (const VendorTraits* t = registry_.traits_of(handle)) return *t;
  const VendorTraits* latest = latest_traits_.load(std::memory_order_relaxed);
  return latest ? *latest : traits(Vendor::cuda_runtime);
}

const VendorTraits& Layer::traits_of_kernel(const void* stub) {
  KernelRecord* k = registry_.kernel_for(stub);
  if (k && k->fatbin && k->fatbin->traits) return *k->fatbin->traits;
  return traits_of_handle(nullptr);
}

void Layer::module_loaded(const void* module, const void* image, Vendor vendor, bool library) {
  const VendorTraits& t = traits(vendor);
  if (!t.read_module) return;
  size_t images = 0;
  std::unique_ptr<FatbinRecord> record = t.read_module(module, image, images);  // sets images: not in one call
  record->traits = &t;
  // What the module's code defines as globals (cuFFT keeps the pointers to its
  // twiddle tables in `lut_sp`/`lut_dp`, set at plan time): a launch's record
  // must hold them, and a replay restores them by name.
  std::vector<std::pair<std::string, uint64_t>> globals;
  if (!library && t.module_global && record->code)
    for (const DeviceGlobal& g : record->code->globals)
      if (g.size) globals.emplace_back(g.name, g.size);
  publish(module, std::move(record), images);
  for (const auto& [name, size] : globals)
    if (const kir_hook_global* view = registry_.add_module_global(module, name.c_str(), size, t.module_global))
      clients_.each([&](const kir_hook_client& c) {
        if (c.global_registered) c.global_registered(c.user, view);
      });
}

void Layer::publish(const void* handle, std::unique_ptr<FatbinRecord> record, size_t images) {
  fatbin_unregistered(handle, nullptr);  // a live handle reused without our seeing it unregistered
  registry_.publish(handle, std::move(record));
  clients_.each([&](const kir_hook_client& c) {
    if (c.fatbin_registered) c.fatbin_registered(c.user, handle, images);
  });
}

void Layer::fatbin_unregistered(const void* handle, const char* api) {
  std::optional<size_t> kernels = registry_.kernels_of(handle);
  if (!kernels) {
    if (api) report_failure(Failure::handle, describe(api, handle), "a handle the layer never saw registered");
    return;
  }
  // Clients first: the image is still mapped and kir_hook_kernel_code still answers.
  clients_.each([&](const kir_hook_client& c) {
    if (c.fatbin_unregistered) c.fatbin_unregistered(c.user, handle, *kernels);
  });
  registry_.retire(handle);
}

void Layer::kernel_registered(const void* handle, const void* stub, const char* name) {
  FatbinRecord* fatbin = registry_.decoded_fatbin(handle);
  if (!fatbin)
    report_failure(Failure::kernel, "kernel " + std::string(name ? name : ""),
                   describe("fatbin", handle) + " was never registered");
  add_kernel(handle, stub, name, fatbin);
}

void Layer::function_found(const void* module, const void* function, const char* name) {
  if (registry_.has_kernel(function)) return;  // looked up before
  add_kernel(module, function, name, registry_.fatbin(module));
}

void Layer::add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin) {
  const kir_hook_kernel* view = registry_.add_kernel(handle, stub, name, fatbin);
  if (!view) return;
  clients_.each([&](const kir_hook_client& c) {
    if (c.kernel_registered) c.kernel_registered(c.user, view);
  });
}

const void* Layer::stub_of_handle(const void* handle) const {
  if (!clients_.any()) return handle;  // no client asks which kernel it is
  return registry_.stub_of_handle(handle);
}

const kir_hook_kernel* Layer::kernel_view(const void* stub) {
  KernelRecord* k = registry_.kernel_for(stub);
  return k ? &k->view : nullptr;
}

void Layer::global_registered(const void* handle, const void* host, const char* name, size_t size,
                              SymbolResolver resolve) {
  bool added = false;
  const kir_hook_global* view = registry_.add_global(handle, host, name, size, resolve, added);
  if (!added) return;
  clients_.each([&](const kir_hook_client& c) {
    if (c.global_registered) c.global_registered(c.user, view);
  });
}

void Layer::allocated(uint64_t address, uint64_t size, int kind) {
  kir_hook_allocation a = allocations_.add(address, size, kind);
  clients_.each([&](const kir_hook_client& c) {
    if (c.allocated) c.allocated(c.user, &a);
  });
}

void Layer::freed(uint64_t address) {
  kir_hook_allocation a{};
  if (!allocations_.remove(address, a)) return;
  clients_.each([&](const kir_hook_client& c) {
    if (c.freed) c.freed(c.user, &a);
  });
}

bool Layer::serve_allocation(uint64_t size, const void* stream, uint64_t& address) {
  if (!allocations_.serve(size, stream, address)) return false;
  allocated(address, size, KIR_ALLOC_DEVICE);
  return true;
}

bool Layer::release_allocation(uint64_t address, const void* stream) {
  if (!allocations_.release(address, stream)) return false;
  freed(address);
  return true;
}

kir_hash128 Layer::launch_identity(KernelRecord& k, const kir_hook_launch& launch) {
  static const std::string kNoArch;
  const std::string& arch = k.fatbin ? k.fatbin->arch : kNoArch;
  const KernelRecord::IdentityPrefix* prefix = k.identity_prefix.load(std::memory_order_acquire);
  if (!prefix || prefix->arch != arch) {  // the first launch (or the image's arch changed)
    auto* fresh = new KernelRecord::IdentityPrefix{
        arch,
        std::string(DynamicHash(HashDomain::launch_identity, {k.view.static_hash.high, k.view.static_hash.low}, arch)
                        .encoded())};
    if (k.identity_prefix.compare_exchange_strong(prefix, fresh, std::memory_order_acq_rel))
      prefix = fresh;   // the one it replaced (if any) stays allocated: another launch may hold it
    else delete fresh;  // another thread's is in place: `prefix` holds it now
  }
  if (prefix->arch != arch)  // lost a race with an arch change: encode this one in full
    prefix = nullptr;
  const uint32_t grid[3] = {launch.grid.x, launch.grid.y, launch.grid.z};
  const uint32_t block[3] = {launch.block.x, launch.block.y, launch.block.z};
  Hash128 d = prefix ? kir::launch_identity_from(prefix->bytes, launch.args, k.sizes.data(), uint32_t(k.sizes.size()),
                                                 grid, block, launch.shared_bytes)
                     : kir::launch_identity({k.view.static_hash.high, k.view.static_hash.low}, arch, launch.args,
                                            k.sizes.data(), uint32_t(k.sizes.size()), grid, block, launch.shared_bytes);
  return {d.high, d.low};
}

void Layer::claim(kir_hook_launch& launch, Claim& claim, Vendor vendor) {
  int client = clients_.claim(launch, claim.sub);
  if (client < 0) return;
  claim.client = client;
  launch.claimed_by = client;
  launch.substitute_id = claim.sub.id;
  if (claim.sub.kind == KIR_SUBSTITUTE_HANDLED) {
    launch.outcome = KIR_LAUNCH_HANDLED;
    Counts::add(kHandled);
  } else if ((claim.function = substitute_function(launch, claim, vendor))) {
    launch.outcome = KIR_LAUNCH_SUBSTITUTED;
    Counts::add(kSubstituted);
  } else {
    Counts::add(kSubstituteFailures);  // reported by substitute_function; the original runs
  }
}

void Layer::launch_begin(kir_hook_launch& launch, Claim* claim, Vendor vendor) {
  Counts::add(kLaunches);  // the interposers call this only with a client loaded (else count_launch)
  const uint32_t needs = clients_.needs();
  KernelRecord* k = needs & ClientTable::kNeedsKernel ? registry_.kernel_for(launch.host_stub) : nullptr;
  launch.kernel = k ? &k->view : nullptr;
  // API 11: every launch says its runtime (clients skip nothing of it: one store)
  launch.vendor = traits(vendor).hook_vendor;
  if (k && (needs & ClientTable::kNeedsIdentity)) launch.launch_identity = launch_identity(*k, launch);  // API 5
  if (needs & ClientTable::kNeedsDevice) fill_device(launch, vendor, k);                                 // API 7
  if (claim && clients_.overriding()) this->claim(launch, *claim, vendor);
  clients_.each([&](const kir_hook_client& c) {
    if (c.launch_begin) c.launch_begin(c.user, &launch);
  });
}

void Layer::fill_device(kir_hook_launch& launch, Vendor vendor, const KernelRecord* k) {
  const VendorTraits& t = traits(vendor);
  std::string why;
  if (const void* site = t.load_site(vendor, why))
    t.device(site, k && k->fatbin ? &k->fatbin->arch : nullptr, launch.device, launch.arch, launch.context);
}

int Layer::substitute_loaded(int client, const kir_hook_launch& launch, Vendor vendor, const void* site, kir_hash128 id,
                             void* module, void* function, const char* entry) {
  const kir_hook_client& c = clients_.at(size_t(client));
  if (!c.on_loaded) return 0;
  const KernelRecord* k = registry_.kernel_for(launch.host_stub);
  kir_hook_loaded loaded{};
  loaded.struct_size = sizeof loaded;
  loaded.id = id;
  loaded.kernel = k ? &k->view : nullptr;
  loaded.module = module;
  loaded.function = function;
  loaded.entry = entry;
  traits(vendor).device(site, k && k->fatbin ? &k->fatbin->arch : nullptr, loaded.device, loaded.arch, loaded.context);
  return c.on_loaded(c.user, &loaded);
}

void Layer::stats(kir_hook_stats& out) const {
  kir_hook_stats s{};
  size_t size = std::min<size_t>(out.struct_size ? out.struct_size : sizeof s, sizeof s);
  s.struct_size = uint32_t(size);
  registry_.counts(s);
  s.failures = failure_count();
  s.handled = Counts::sum(kHandled);
  s.substituted = Counts::sum(kSubstituted);
  s.substitute_loads = substitute_loads_;
  s.substitute_failures = Counts::sum(kSubstituteFailures);
  s.live_allocations = allocations_.live();
  s.launches = Counts::sum(kLaunches);
  std::memcpy(&out, &s, size);
}

}  // namespace kir::hook
