#define KIR_RECORD_DEFINING  // kir/record.h: this file defines kir_record_annotate (not weak)
// The hook layer's C API (kir/hooks.h): every kir_hook_* export, each a thin
// call into the layer, its registry or its allocation tracker.
#include "kernel_code.hpp"
#include "lambda_captures.hpp"
#include "layer.hpp"

#include <cstddef>
#include <cstdint>

// The frozen layouts of the structs the layer hands out or fills (LP64):
// each field where every earlier API put it, and each appended field where its
// API put it (docs/abi.md "hooks.h"). A change here breaks built clients.
#if UINTPTR_MAX == UINT64_MAX
static_assert(offsetof(kir_hook_kernel, static_hash) == 48 && offsetof(kir_hook_kernel, ir_size) == 72);
static_assert(offsetof(kir_hook_kernel, unloaded) == 80);       // API 2
static_assert(offsetof(kir_hook_kernel, jit_arg_count) == 84);  // API 4
static_assert(offsetof(kir_hook_kernel, jit_args) == 88);       // API 4
static_assert(offsetof(kir_hook_kernel, struct_size) == 96);    // API 6
static_assert(sizeof(kir_hook_kernel) == 104);
static_assert(offsetof(kir_hook_global, fatbin) == 24);
static_assert(offsetof(kir_hook_global, unloaded) == 32);     // API 2
static_assert(offsetof(kir_hook_global, struct_size) == 36);  // API 6
static_assert(sizeof(kir_hook_global) == 40);
static_assert(offsetof(kir_hook_launch, launch_identity) == 64 && offsetof(kir_hook_launch, api) == 88);
static_assert(offsetof(kir_hook_launch, outcome) == 96);         // API 4
static_assert(offsetof(kir_hook_launch, claimed_by) == 100);     // API 4
static_assert(offsetof(kir_hook_launch, substitute_id) == 104);  // API 4
static_assert(offsetof(kir_hook_launch, struct_size) == 120);    // API 6
static_assert(offsetof(kir_hook_launch, device) == 124);         // API 7
static_assert(offsetof(kir_hook_launch, arch) == 128);           // API 7
static_assert(offsetof(kir_hook_launch, context) == 136);        // API 7
static_assert(offsetof(kir_hook_launch, vendor) == 144);         // API 11
static_assert(sizeof(kir_hook_launch) == 152);
static_assert(offsetof(kir_hook_code, arch) == 24 && sizeof(kir_hook_code) == 32);  // frozen: the caller's memory
static_assert(offsetof(kir_hook_client, fatbin_unregistered) == 88);                // API 2
static_assert(offsetof(kir_hook_client, launch_override) == 96);                    // API 4
static_assert(offsetof(kir_hook_client, launch_skips) == 104);                      // API 5
static_assert(offsetof(kir_hook_client, on_loaded) == 112);                         // API 7
static_assert(sizeof(kir_hook_client) == 120);
static_assert(offsetof(kir_hook_loaded, id) == 8 && offsetof(kir_hook_loaded, arch) == 64);  // API 7
static_assert(sizeof(kir_hook_loaded) == 72);
static_assert(offsetof(kir_hook_substitute, id) == 64);
static_assert(offsetof(kir_hook_substitute, image_kind) == 80);  // API 6
static_assert(sizeof(kir_hook_substitute) == 88);
static_assert(offsetof(kir_hook_stats, failures) == 48);             // API 2
static_assert(offsetof(kir_hook_stats, unregistered) == 56);         // API 2
static_assert(offsetof(kir_hook_stats, handled) == 64);              // API 4
static_assert(offsetof(kir_hook_stats, substitute_failures) == 88);  // API 4
static_assert(sizeof(kir_hook_stats) == 96);
static_assert(sizeof(kir_hook_allocator) == 32 && sizeof(kir_hook_allocation) == 32);
#endif

#define KIR_EXPORT __attribute__((visibility("default")))

using kir::hook::Layer;

extern "C" {

KIR_EXPORT uint32_t kir_hook_api_version(void) { return KIR_HOOK_API_VERSION; }

KIR_EXPORT int kir_hook_add_client(const kir_hook_client* client) { return Layer::get().add_client(client); }

KIR_EXPORT int kir_hook_set_allocator(const kir_hook_allocator* allocator) {
  return Layer::get().set_allocator(allocator);
}

KIR_EXPORT void kir_hook_get_stats(kir_hook_stats* out) {
  if (out) Layer::get().stats(*out);
}

KIR_EXPORT uint64_t kir_hook_failure_count(uint32_t code) { return kir::hook::failure_count(kir::ErrorCode(code)); }

KIR_EXPORT size_t kir_hook_kernel_count(void) { return Layer::get().registry().kernel_count(); }

KIR_EXPORT const kir_hook_kernel* kir_hook_kernel_at(size_t index) { return Layer::get().registry().kernel_at(index); }

KIR_EXPORT size_t kir_hook_global_count(void) { return Layer::get().registry().global_count(); }

KIR_EXPORT const kir_hook_global* kir_hook_global_at(size_t index) { return Layer::get().registry().global_at(index); }

KIR_EXPORT uint64_t kir_hook_global_device_address(const void* host_address) {
  return Layer::get().registry().global_device_address(host_address);
}

KIR_EXPORT int kir_hook_kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code* out) {
  return out && kir::hook::kernel_code(Layer::get().registry(), kernel, which, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_kernel_code_units(const kir_hook_kernel* kernel) {
  return kir::hook::kernel_code_units(Layer::get().registry(), kernel);
}

KIR_EXPORT int kir_hook_kernel_code_unit(const kir_hook_kernel* kernel, size_t index, kir_hook_code* out) {
  return out && kir::hook::kernel_code_unit(Layer::get().registry(), kernel, index, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_kernel_ir_count(const kir_hook_kernel* kernel) {
  return kir::hook::kernel_ir_count(Layer::get().registry(), kernel);
}

KIR_EXPORT int kir_hook_kernel_ir(const kir_hook_kernel* kernel, size_t index, kir_bytes* out) {
  return out && kir::hook::kernel_ir(Layer::get().registry(), kernel, index, *out) ? 1 : 0;
}

KIR_EXPORT int kir_hook_kernel_proteus_hash(const kir_hook_kernel* kernel, int llvm20_or_newer, uint64_t* out) {
  return out && kir::hook::kernel_proteus_hash(Layer::get().registry(), kernel, llvm20_or_newer != 0, *out) ? 1 : 0;
}

KIR_EXPORT size_t kir_hook_kernel_captures(const kir_hook_kernel* kernel, kir_jit_capture* out, size_t capacity) {
  return kir::hook::LambdaCaptures::get().of_kernel(Layer::get().registry(), kernel, out, out ? capacity : 0);
}

KIR_EXPORT size_t kir_hook_fatbin_globals(const void* fatbin, const kir_hook_global** out, size_t capacity) {
  return Layer::get().registry().fatbin_globals(fatbin, out, out ? capacity : 0);
}

KIR_EXPORT void kir_hook_track_allocation(uint64_t address, uint64_t size, int kind) {
  if (kind < KIR_ALLOC_DEVICE || kind > KIR_ALLOC_HOST_PINNED)  // tracked all the same: the memory exists
    kir::hook::report_failure(kir::hook::Failure::allocation, "kir_hook_track_allocation " + kir::hex(address),
                              "kind " + std::to_string(kind) + " is not a KIR_ALLOC_* value");
  Layer::get().allocated(address, size, kind);
}

KIR_EXPORT void kir_hook_untrack_allocation(uint64_t address) { Layer::get().freed(address); }

KIR_EXPORT int kir_hook_find_allocation(uint64_t address, kir_hook_allocation* out) {
  return out && Layer::get().allocations().find(address, *out) ? 1 : 0;
}

KIR_EXPORT int kir_hook_tag_allocation(uint64_t address, void* tag) {
  return Layer::get().allocations().tag(address, tag) ? 1 : 0;
}

KIR_EXPORT int kir_hook_allocation_annotation(uint64_t address, kir_record_annotation* out) {
  if (!out || out->struct_size < sizeof(kir_record_annotation)) return 0;
  return Layer::get().allocations().annotation(address, *out) ? 1 : 0;
}

/// kir/record.h: the app's call (Mneme's annotate_impl, src/MnemeAnnotation.cpp).
KIR_EXPORT int kir_record_annotate(const void* device_ptr, const kir_record_annotation* a) {
  if (!device_ptr || !a || a->struct_size < sizeof(kir_record_annotation)) return KIR_ANNOTATE_INVALID;
  bool known =
      a->dtype >= KIR_DTYPE_F16 && a->dtype <= KIR_DTYPE_F64 && a->kind <= KIR_TOLERANCE_ULP && a->norm <= KIR_NORM_L2;
  bool threshold =
      a->threshold >= 0 && a->threshold <= 1e300 &&
      (a->kind != KIR_TOLERANCE_ULP || (a->threshold == double(uint64_t(a->threshold)) && a->threshold < 9.2e18));
  if (!known || !threshold) return KIR_ANNOTATE_INVALID;
  uint64_t address = reinterpret_cast<uint64_t>(device_ptr);
  return Layer::get().allocations().annotate(address, *a) ? KIR_ANNOTATE_OK : KIR_ANNOTATE_NO_ALLOCATION;
}

KIR_EXPORT void kir_hook_for_each_allocation(void (*visit)(void*, const kir_hook_allocation*), void* user) {
  if (visit) Layer::get().allocations().for_each(visit, user);
}

}  // extern "C"
