// The layer's services for clients that capture launches (a recorder): a
// kernel's device code as bytes, the live allocations, and a client allocator
// that serves device allocations in place of the runtime.
#include <cstring>

#include "layer.hpp"
#include "kir/hash/kernel_code.hpp"

namespace kir::hook {

namespace {

/// The PTX entry of `container` the driver would JIT on device `cc`: the
/// newest not above it (the newest of all when cc is 0).
const FatbinEntry* pick_ptx(const FatbinContainer& container, int cc) {
  const FatbinEntry* best = nullptr;
  for (const FatbinEntry& e : container.entries()) {
    if (e.kind != uint16_t(FatbinEntryKind::ptx) || e.obfuscated()) continue;
    if (cc && int(e.arch) > cc) continue;
    if (!best || e.arch > best->arch) best = &e;
  }
  return best;
}

/// `entry`'s decoded bytes into `out`; a failure is reported against `handle`.
bool decode_into(const FatbinEntry* entry, std::vector<uint8_t>& out, const void* handle) {
  if (!entry) return false;
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(*entry, scratch);
  if (!bytes) {
    report_failure(describe("fatbin", handle), "kir_hook_kernel_code: sm_" + std::to_string(entry->arch) + " " +
                                                   (entry->kind == uint16_t(FatbinEntryKind::ptx) ? "PTX" : "cubin") +
                                                   ": " + bytes.error().message());
    return false;
  }
  out.assign(bytes->data(), bytes->data() + bytes->size());
  return true;
}

void fill(kir_hook_code& out, const std::vector<uint8_t>& bytes, const char* kind, const std::string& arch) {
  out.bytes = bytes.data();
  out.size = bytes.size();
  out.kind = kind;
  out.arch = arch.c_str();
}

}  // namespace

FatbinRecord* Layer::live_fatbin_of(const kir_hook_kernel* kernel) {
  if (!kernel || __atomic_load_n(&kernel->unloaded, __ATOMIC_ACQUIRE)) return nullptr;
  KernelRecord* k = kernel_for(kernel->host_stub);
  return k && &k->view == kernel ? k->fatbin : nullptr;  // not a stale view of an earlier load
}

namespace {

/// The embedded modules kernel `name`'s static hash covers in `f`'s decoded code
/// (kir/hash/kernel_code.hpp), as indices into its `ir`; empty when none.
std::vector<uint32_t> ir_modules(const FatbinRecord& f, const std::string& name) {
  if (!f.code || f.code->ir.empty()) return {};
  KernelCode k = kernel_code(*f.code, name);
  return k.kind == CodeKind::ir ? k.modules : std::vector<uint32_t>{};
}

}  // namespace

size_t Layer::kernel_ir_count(const kir_hook_kernel* kernel) {
  FatbinRecord* f = live_fatbin_of(kernel);
  if (!f) return 0;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  return f->unloaded ? 0 : ir_modules(*f, kernel->name).size();
}

bool Layer::kernel_ir(const kir_hook_kernel* kernel, size_t index, kir_bytes& out) {
  FatbinRecord* f = live_fatbin_of(kernel);
  if (!f) return false;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  if (f->unloaded) return false;
  std::vector<uint32_t> modules = ir_modules(*f, kernel->name);
  if (index >= modules.size()) return false;
  const std::vector<uint8_t>& bitcode = f->code->ir[modules[index]].bitcode;
  out.data = bitcode.data();
  out.size = bitcode.size();
  return true;
}

size_t Layer::kernel_code_units(const kir_hook_kernel* kernel) {
  FatbinRecord* f = live_fatbin_of(kernel);
  if (!f) return 0;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  return f->unloaded ? 0 : f->units.size();
}

bool Layer::kernel_code_unit(const kir_hook_kernel* kernel, size_t index, kir_hook_code& out) {
  FatbinRecord* f = live_fatbin_of(kernel);
  if (!f) return false;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  if (f->unloaded || index >= f->units.size()) return false;
  FatbinRecord::Unit& u = f->units[index];
  if (!u.tried && u.container) {
    u.tried = true;  // a failure is reported once
    const FatbinEntry* ptx = pick_ptx(*u.container, device_compute_capability());
    u.ready = decode_into(ptx, u.ptx, kernel->fatbin);
    if (u.ready) u.arch = "sm_" + std::to_string(ptx->arch);
  }
  if (!u.ready) return false;
  fill(out, u.ptx, name(ImageKind::ptx), u.arch);
  return true;
}

bool Layer::kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code& out) {
  FatbinRecord* f = live_fatbin_of(kernel);
  if (!f || !f->code) return false;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  if (f->unloaded) return false;  // unregistered since the lookup: its image may be gone
  const void* handle = kernel->fatbin;
  if (!f->launched_ready && !f->launched_tried && f->container) {
    f->launched_tried = true;  // a failure is reported once
    f->launched_ready = decode_into(f->chosen, f->launched_bytes, handle);
  }
  bool launched_is_ptx = f->code->kind == ImageKind::ptx;
  if (which == KIR_CODE_LAUNCHED || (which == KIR_CODE_PTX && launched_is_ptx)) {
    if (!f->launched_ready) return false;
    fill(out, f->launched_bytes, name(f->code->kind), f->arch);
    return true;
  }
  if (which != KIR_CODE_PTX || !f->container) return false;
  if (!f->ptx_ready && !f->ptx_tried) {
    f->ptx_tried = true;
    const FatbinEntry* ptx = pick_ptx(*f->container, device_compute_capability());
    f->ptx_ready = decode_into(ptx, f->ptx_bytes, handle);
    if (f->ptx_ready) f->ptx_arch = "sm_" + std::to_string(ptx->arch);
  }
  if (!f->ptx_ready) return false;
  fill(out, f->ptx_bytes, name(ImageKind::ptx), f->ptx_arch);
  return true;
}

void Layer::for_each_allocation(void (*visit)(void*, const kir_hook_allocation*), void* user) const {
  std::shared_lock<std::shared_mutex> lock(allocations_mutex_);
  for (const auto& [address, a] : allocations_) visit(user, &a);
}

int Layer::set_allocator(const kir_hook_allocator* allocator) {
  std::lock_guard<std::mutex> lock(clients_mutex_);
  return install_allocator(allocator);
}

int Layer::install_allocator(const kir_hook_allocator* allocator) {
  if (!allocator || allocator->struct_size < sizeof(kir_hook_allocator) || !allocator->allocate ||
      !allocator->release || has_allocator_.load())
    return -1;
  allocator_ = *allocator;
  has_allocator_.store(true, std::memory_order_release);
  return 0;
}

bool Layer::serve_allocation(uint64_t size, const void* stream, uint64_t& address) {
  if (!has_allocator_.load(std::memory_order_acquire) || size == 0) return false;
  if (allocator_.allocate(allocator_.user, size, stream, &address) != 0) return false;
  allocated(address, size, KIR_ALLOC_DEVICE);
  return true;
}

bool Layer::release_allocation(uint64_t address, const void* stream) {
  if (!has_allocator_.load(std::memory_order_acquire) || address == 0) return false;
  if (allocator_.release(allocator_.user, address, stream) != 1) return false;
  freed(address);
  return true;
}

}  // namespace kir::hook

#define KIR_EXPORT __attribute__((visibility("default")))

extern "C" {

KIR_EXPORT int kir_hook_kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code* out) {
  return out && kir::hook::Layer::get().kernel_code(kernel, which, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_kernel_code_units(const kir_hook_kernel* kernel) {
  return kir::hook::Layer::get().kernel_code_units(kernel);
}

KIR_EXPORT int kir_hook_kernel_code_unit(const kir_hook_kernel* kernel, size_t index, kir_hook_code* out) {
  return out && kir::hook::Layer::get().kernel_code_unit(kernel, index, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_kernel_ir_count(const kir_hook_kernel* kernel) {
  return kir::hook::Layer::get().kernel_ir_count(kernel);
}

KIR_EXPORT int kir_hook_kernel_ir(const kir_hook_kernel* kernel, size_t index, kir_bytes* out) {
  return out && kir::hook::Layer::get().kernel_ir(kernel, index, *out) ? 1 : 0;
}

KIR_EXPORT void kir_hook_for_each_allocation(void (*visit)(void*, const kir_hook_allocation*), void* user) {
  if (visit) kir::hook::Layer::get().for_each_allocation(visit, user);
}

KIR_EXPORT int kir_hook_set_allocator(const kir_hook_allocator* allocator) {
  return kir::hook::Layer::get().set_allocator(allocator);
}

}  // extern "C"
