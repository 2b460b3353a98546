// A registered kernel's device code for clients (kernel_code.hpp): the bytes of
// the image its launches use, the PTX that suits this device, a device-linked
// registration's units, and the embedded IR.
#include "kernel_code.hpp"

#include "failure_log.hpp"
#include "image_choice.hpp"
#include "kir/hash/kernel_code.hpp"
#include "kir/hash/proteus.hpp"
#include "kir/support/compression.hpp"
#include "vendor.hpp"

namespace kir::hook {

namespace {

/// `entry`'s decoded bytes into `out`; a failure is reported against `handle`.
bool decode_into(const FatbinEntry* entry, std::vector<uint8_t>& out, const void* handle) {
  if (!entry) return false;
  Scratch scratch;
  Expected<ByteView> bytes = decode_image(*entry, scratch);
  if (!bytes) {
    report_failure(Failure::code, describe("fatbin", handle),
                   "kir_hook_kernel_code: sm_" + std::to_string(entry->arch) + " " +
                       (entry->kind == uint16_t(FatbinEntryKind::ptx) ? "PTX" : "cubin") + ": ",
                   bytes.error());
    return false;
  }
  out.assign(bytes->data(), bytes->data() + bytes->size());
  return true;
}

/// Fill the caller's kir_hook_code: exactly its four fields (kir/hooks.h: it is frozen).
void fill(kir_hook_code& out, const std::vector<uint8_t>& bytes, ImageKind kind, const std::string& arch) {
  out.bytes = bytes.data();
  out.size = bytes.size();
  out.kind = name(kind);
  out.arch = arch.c_str();
}

/// The embedded modules kernel `name`'s static hash covers in `f`'s decoded code
/// (kir/hash/kernel_code.hpp), as indices into its `ir`; empty when none.
std::vector<uint32_t> ir_modules(const FatbinRecord& f, const std::string& name) {
  if (!f.code || f.code->ir.empty()) return {};
  KernelCode k = kernel_code(*f.code, name);
  return k.kind == CodeKind::ir ? k.modules : std::vector<uint32_t>{};
}

/// `f`'s PTX for this device, decoded once (under its code lock).
bool ready_ptx(FatbinRecord& f, const void* handle) {
  if (!f.ptx_ready && !f.ptx_tried) {
    f.ptx_tried = true;  // a failure is reported once
    const FatbinEntry* ptx = pick_ptx(*f.container, device_compute_capability());
    f.ptx_ready = decode_into(ptx, f.ptx_bytes, handle);
    if (f.ptx_ready) f.ptx_arch = "sm_" + std::to_string(ptx->arch);
  }
  return f.ptx_ready;
}

}  // namespace

size_t kernel_ir_count(Registry& registry, const kir_hook_kernel* kernel) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
  if (!f) return 0;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  return f->unloaded ? 0 : ir_modules(*f, kernel->name).size();
}

bool kernel_ir(Registry& registry, const kir_hook_kernel* kernel, size_t index, kir_bytes& out) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
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

size_t kernel_code_units(Registry& registry, const kir_hook_kernel* kernel) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
  if (!f) return 0;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  return f->unloaded ? 0 : f->units.size();
}

bool kernel_code_unit(Registry& registry, const kir_hook_kernel* kernel, size_t index, kir_hook_code& out) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
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
  fill(out, u.ptx, ImageKind::ptx, u.arch);
  return true;
}

bool kernel_code(Registry& registry, const kir_hook_kernel* kernel, int which, kir_hook_code& out) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
  if (!f || !f->code) return false;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  if (f->unloaded) return false;  // unregistered since the lookup: its image may be gone
  const void* handle = kernel->fatbin;
  if (!f->launched_ready && !f->launched_tried && f->container) {
    f->launched_tried = true;  // a failure is reported once
    f->launched_ready = decode_into(f->chosen, f->launched_bytes, handle);
  } else if (!f->launched_ready && !f->launched_tried && f->traits && f->traits->registered_code) {
    f->launched_tried = true;  // a registration without a container (HIP's bundle): read from its wrapper
    std::string why;
    f->launched_ready = f->traits->registered_code(*f, f->launched_bytes, why);
    if (!f->launched_ready)
      report_failure(Failure::code, describe("fatbin", handle), "kir_hook_kernel_code: " + f->arch + ": " + why);
  }
  bool launched_is_ptx = f->code->kind == ImageKind::ptx;
  if (which == KIR_CODE_LAUNCHED || (which == KIR_CODE_PTX && launched_is_ptx)) {
    if (!f->launched_ready) return false;
    fill(out, f->launched_bytes, f->code->kind, f->arch);
    return true;
  }
  if (which != KIR_CODE_PTX || !f->container || !ready_ptx(*f, handle)) return false;
  fill(out, f->ptx_bytes, ImageKind::ptx, f->ptx_arch);
  return true;
}

bool kernel_proteus_hash(Registry& registry, const kir_hook_kernel* kernel, bool llvm20_or_newer, uint64_t& out) {
  FatbinRecord* f = registry.live_fatbin_of(kernel);
  if (!f || !f->code || f->code->kind != ImageKind::code_object) return false;
  std::lock_guard<std::mutex> lock(f->code_mutex);
  if (f->unloaded) return false;
  Expected<std::optional<uint64_t>> module = proteus_hip_module_hash(*f->code, llvm20_or_newer);
  if (!module || !*module) return false;  // not built by the pass (or a section Proteus could not read)
  out = proteus_static_hash_of_module(kernel->name, **module, llvm20_or_newer);
  return true;
}

}  // namespace kir::hook
