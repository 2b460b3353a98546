// What every interposer file (CUDA runtime, driver, HIP, Proteus ABI) shares:
// finding the real function, and reporting a launch, an allocation or a free
// around the real call. Calls made inside another reported call (the runtime's
// own driver calls, a Proteus launch forwarded to cudaLaunchKernel) are only
// forwarded, so each app-level call is reported once.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <type_traits>

#include "layer.hpp"

#define KIR_EXPORT __attribute__((visibility("default")))

namespace kir::hook {

/// dim3, as the runtimes pass it by value.
struct Dim3 {
  unsigned x, y, z;
};

/// glibc's own dlsym for a lookup by handle, past the layer's dlsym interposer
/// (dlsym.cpp), which would hand back the layer's cuGetProcAddress.
void* real_dlsym(void* handle, const char* name);

/// The layer's driver interposer exported as `name`, or nullptr (driver_api.cpp).
void* driver_interposer(const char* name);

/// The layer's HIP runtime interposer exported as `name`, or nullptr (hip_runtime.cpp).
void* hip_interposer(const char* name);

/// KIR_HOOK_LOG_PROCS=1: one stderr line per driver entry point looked up by
/// handle (`how`: "dlsym") and whether the layer's was handed out (driver_api.cpp).
void log_driver_lookup(const char* how, const char* name, bool ours);

/// `name` in the driver (or HIP runtime), without aborting: next in the lookup
/// order, else in `library` when it is loaded (a runtime dlopen'ed it), else
/// nullptr. Never the layer's own interposer.
inline void* vendor_symbol(const char* name, const char* library) {
  if (void* f = dlsym(RTLD_NEXT, name)) return f;
  if (void* h = dlopen(library, RTLD_LAZY | RTLD_NOLOAD)) return real_dlsym(h, name);
  return nullptr;
}

/// A driver (or HIP runtime) entry point, kept once found: a runtime may load
/// its driver only at its first call, so a lookup that found nothing is retried.
/// `libraries`: where to look (VendorTraits::libraries, NULL-terminated).
struct DriverEntry {
  const char* name;
  const char* const* libraries;
  std::atomic<void*> found{nullptr};
  DriverEntry(const char* n, const char* const* l) : name(n), libraries(l) {}

  template <class F>
  F get() {
    void* f = found.load(std::memory_order_acquire);
    if (f) return reinterpret_cast<F>(f);
    for (const char* const* lib = libraries; *lib && !f; ++lib) f = vendor_symbol(name, *lib);
    if (f) found.store(f, std::memory_order_release);
    return reinterpret_cast<F>(f);
  }
};

/// The real `name`: vendor_symbol in one of `libraries`. Aborts, naming
/// `runtime`, when none has it.
inline void* find_real(const char* name, std::initializer_list<const char*> libraries, const char* runtime) {
  for (const char* lib : libraries)
    if (void* f = vendor_symbol(name, lib)) return f;
  std::fprintf(stderr, "kir-hook: %s not found in the %s\n", name, runtime);
  std::abort();
}

/// A launch event's fields as every launch API has them.
inline kir_hook_launch launch_event(const char* api, const void* function, Dim3 grid, Dim3 block, size_t shared_bytes,
                                    const void* stream, void** args) {
  kir_hook_launch l;  // every field set here, one store each (a `{}` first cost a rep stos per launch)
  l.kernel = nullptr;
  l.host_stub = function;
  l.grid = {grid.x, grid.y, grid.z};
  l.block = {block.x, block.y, block.z};
  l.shared_bytes = shared_bytes;
  l.stream = stream;
  l.args = args;
  l.launch_identity = {0, 0};
  l.result = 0;
  l.api = api;
  l.outcome = KIR_LAUNCH_ORIGINAL;
  l.claimed_by = -1;
  l.substitute_id = {0, 0};
  l.struct_size = sizeof l;
  l.device = -1;  // API 7: set in launch_begin when a client reads them
  l.arch = "";
  l.context = nullptr;
  l.vendor = 0;  // API 11: set in launch_begin
  return l;
}

/// One launch through the layer: launch_begin, the real call, launch_completed
/// (`ops` lets clients wait for the kernel). Returns the real call's result.
template <class Call>
int traced_launch(kir_hook_launch launch, const StreamOps* ops, Call&& call) {
  if (RuntimeCall::active()) return call();
  RuntimeCall inside;
  Layer& layer = Layer::get();
  if (!layer.has_clients()) return layer.count_launch(), call();  // nobody to tell (issue 15)
  layer.launch_begin(launch);
  launch.result = call();
  layer.launch_completed(launch, ops);
  return launch.result;
}

/// The same for a launch a client may claim (API 4): `substitute(function)`
/// launches a claimed substitute with the app's configuration; a HANDLED claim
/// launches nothing and returns the client's result. Without an overriding
/// client this is traced_launch (one relaxed load more).
template <class Call, class Substitute>
int claimable_launch(kir_hook_launch launch, const StreamOps* ops, Vendor vendor, Call&& call,
                     Substitute&& substitute) {
  if (RuntimeCall::active()) return call();
  RuntimeCall inside;
  Layer& layer = Layer::get();
  if (!layer.has_clients()) return layer.count_launch(), call();  // nobody to tell or to claim (issue 15)
  Claim claim;
  layer.launch_begin(launch, &claim, vendor);
  if (launch.outcome == KIR_LAUNCH_HANDLED) launch.result = claim.sub.result;
  else if (launch.outcome == KIR_LAUNCH_SUBSTITUTED) launch.result = substitute(claim.function);
  else launch.result = call();
  layer.launch_completed(launch, ops);
  return launch.result;
}

/// The driver's launch entry points, for substitutes of runtime-API launches
/// (override.cpp: found next in the lookup order or in libcuda.so.1; a missing
/// one returns CUDA_ERROR_NOT_FOUND, 500). `config` is a CUlaunchConfig.
int driver_launch(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args, void** extra, bool ptsz);
int driver_launch_ex(const void* config, void* f, void** args, void** extra, bool ptsz);
int driver_launch_cooperative(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args);
/// hipModuleLaunchKernel, for substitutes of HIP launches; hipModuleLaunchCooperativeKernel
/// (ROCm 6.x) for cooperative ones; hipExtModuleLaunchKernel (its C name, ROCm 6.x, else
/// ROCm 5.2's C++ one) for hipExtLaunchKernel's, with its events and flags (a missing one
/// returns hipErrorNotFound, 500).
int hip_module_launch(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args);
int hip_module_launch_cooperative(void* f, Dim3 grid, Dim3 block, unsigned shared, void* stream, void** args);
int hip_ext_module_launch(void* f, Dim3 grid, Dim3 block, size_t shared, void* stream, void** args, void* start,
                          void* stop, unsigned flags);

/// A driver-style launch's `extra` (cuLaunchKernel's, hipModuleLaunchKernel's):
/// {key, value, ..., end} pairs, the packed argument buffer under key 1
/// (CU_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_POINTER), read as
/// `kernel`'s parameters into `slots` (64); nullptr when there is none. `end`:
/// CU_LAUNCH_PARAM_END is NULL (cuda.h), HIP_LAUNCH_PARAM_END is (void*)3
/// (ROCm hip/hip_runtime_api.h, 5.2 and 6.x).
inline void** unpack_extra(void** extra, const kir_hook_kernel* kernel, void** slots, const void* end) {
  if (!extra || !kernel) return nullptr;
  const uint8_t* buffer = nullptr;
  for (int i = 0; i < 16 && extra[i] != end; i += 2)
    if (extra[i] == reinterpret_cast<void*>(1)) buffer = static_cast<const uint8_t*>(extra[i + 1]);
  if (!buffer) return nullptr;
  for (uint32_t p = 0; p < kernel->param_count && p < 64; ++p)
    slots[p] = const_cast<uint8_t*>(buffer + kernel->param_offsets[p]);
  return slots;
}

/// A call the app made: the real one, then `record()` when it succeeded (0).
template <class Call, class Record>
int reported_call(Call&& call, Record&& record) {
  if (RuntimeCall::active()) return call();
  RuntimeCall inside;
  int r = call();
  if (r == 0) record();
  return r;
}

inline uint64_t address_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }
inline uint64_t address_of(unsigned long long p) { return p; }  // CUdeviceptr

/// An allocation call: `size` bytes of `kind` at `*ptr` once it succeeded.
template <class Ptr, class Call>
int tracked_alloc(Ptr* ptr, uint64_t size, int kind, Call&& call) {
  return reported_call(call, [&] {
    if (ptr && *ptr) Layer::get().allocated(address_of(*ptr), size, kind);
  });
}

/// A free call: the allocation at `address` is gone once it succeeded.
template <class Call>
int tracked_free(uint64_t address, Call&& call) {
  return reported_call(call, [&] {
    if (address) Layer::get().freed(address);
  });
}

/// `address` as the allocation call's pointer type (void* or CUdeviceptr).
template <class Ptr>
Ptr as_pointer(uint64_t address) {
  if constexpr (std::is_pointer_v<Ptr>) return reinterpret_cast<Ptr>(static_cast<uintptr_t>(address));
  else return static_cast<Ptr>(address);
}

/// A device allocation: served by a client's allocator when one takes it
/// (kir_hook_set_allocator), else the runtime's own call, tracked.
template <class Ptr, class Call>
int device_alloc(Ptr* ptr, uint64_t size, const void* stream, Call&& call) {
  if (ptr && !RuntimeCall::active()) {
    RuntimeCall inside;
    uint64_t address = 0;
    if (Layer::get().serve_allocation(size, stream, address)) {
      *ptr = as_pointer<Ptr>(address);
      return 0;
    }
  }
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE, call);
}

/// A device free: the client allocator's when it served `address`, else the runtime's, tracked.
template <class Call>
int device_free(uint64_t address, const void* stream, Call&& call) {
  if (!RuntimeCall::active()) {
    RuntimeCall inside;
    if (Layer::get().release_allocation(address, stream)) return 0;
  }
  return tracked_free(address, call);
}

}  // namespace kir::hook
