// Interposers for the CUDA driver API (libcuda.so), for apps that load modules
// at run time (CuPy, Triton, JITs): module loads, function lookups, launches and
// allocations, module unloads — also when the app obtains the entry points through
// cuGetProcAddress. Calls the runtime makes on the app's behalf (inside an
// interposed runtime call) are not reported twice.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "interpose.hpp"
#include "kir_hook_internal/settings.hpp"

namespace {

using kir::hook::Dim3;
using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
constexpr CUresult CUDA_SUCCESS = 0;

#define KIR_REAL(name, type) \
  static const auto real_##name = reinterpret_cast<type>(kir::hook::find_real(#name, {"libcuda.so.1"}, "CUDA driver"))

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }
bool reporting() { return !kir::hook::RuntimeCall::active(); }

/// A launch by a CUfunction the layer never saw looked up: cuFFT loads its module
/// with cuModuleLoadData (seen) but obtains its functions another way (measured on
/// the H200, CUDA 13: no cuModuleGetFunction call). Ask the driver which module
/// and name the function has (cuFuncGetModule, cuFuncGetName: CUDA 12.3) and
/// register it as cuModuleGetFunction would have; once per unknown handle (a
/// handle the driver cannot name, e.g. a CUkernel, is remembered and not asked again).
/// Returns whether it registered `f`.
bool resolve_function(const void* f) {
  using GetModule = CUresult (*)(void**, const void*);
  using GetName = CUresult (*)(const char**, const void*);
  static const auto get_module =
      reinterpret_cast<GetModule>(kir::hook::vendor_symbol("cuFuncGetModule", "libcuda.so.1"));
  static const auto get_name = reinterpret_cast<GetName>(kir::hook::vendor_symbol("cuFuncGetName", "libcuda.so.1"));
  static std::mutex mutex;
  static std::unordered_set<const void*> unnamed;  // grows by handles the driver cannot name
  if (!f || !get_module || !get_name) return false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (unnamed.count(f)) return false;
  }
  void* module = nullptr;
  const char* name = nullptr;
  if (get_module(&module, f) == CUDA_SUCCESS && get_name(&name, f) == CUDA_SUCCESS && name && module) {
    layer().function_found(module, f, name);
    return true;
  }
  std::lock_guard<std::mutex> lock(mutex);
  unnamed.insert(f);
  return false;
}

int synchronize(void* stream) {
  KIR_REAL(cuStreamSynchronize, CUresult (*)(CUstream));
  return real_cuStreamSynchronize(stream);
}
int enqueue_host(void* stream, void (*fn)(void*), void* data) {
  KIR_REAL(cuLaunchHostFunc, CUresult (*)(CUstream, void (*)(void*), void*));
  return real_cuLaunchHostFunc(stream, fn, data);
}
const kir::hook::StreamOps kStreamOps{synchronize, enqueue_host};

/// A driver launch; `substitute(function)` launches a claimed substitute (API 4)
/// with the app's configuration (its `params` or `extra`, untouched).
template <class Call, class Substitute>
CUresult launch(const char* api, const void* f, Dim3 grid, Dim3 block, unsigned shared, CUstream stream, void** params,
                void** extra, Call&& call, Substitute&& substitute) {
  if (!reporting()) return call();
  void* slots[64];
  void** args = params;
  if (layer().has_clients()) {  // the kernel, for clients: named by the driver if never looked up
    const kir_hook_kernel* kernel = layer().kernel_view(f);
    if (!kernel && resolve_function(f)) kernel = layer().kernel_view(f);
    if (!params) args = kir::hook::unpack_extra(extra, kernel, slots, nullptr);  // CU_LAUNCH_PARAM_END
  }
  return kir::hook::claimable_launch(kir::hook::launch_event(api, f, grid, block, shared, stream, args), &kStreamOps,
                                     kir::hook::Vendor::cuda_driver, call, substitute);
}

}  // namespace

extern "C" {

KIR_EXPORT CUresult cuModuleLoadData(void** module, const void* image) {
  KIR_REAL(cuModuleLoadData, CUresult (*)(void**, const void*));
  CUresult r = real_cuModuleLoadData(module, image);
  if (r == CUDA_SUCCESS && module && reporting()) layer().module_loaded(*module, image, kir::hook::Vendor::cuda_driver);
  return r;
}

KIR_EXPORT CUresult cuModuleLoadFatBinary(void** module, const void* fatbin) {
  KIR_REAL(cuModuleLoadFatBinary, CUresult (*)(void**, const void*));
  CUresult r = real_cuModuleLoadFatBinary(module, fatbin);
  if (r == CUDA_SUCCESS && module && reporting())
    layer().module_loaded(*module, fatbin, kir::hook::Vendor::cuda_driver);
  return r;
}

KIR_EXPORT CUresult cuModuleLoadDataEx(void** module, const void* image, unsigned n, void* options, void** values) {
  KIR_REAL(cuModuleLoadDataEx, CUresult (*)(void**, const void*, unsigned, void*, void**));
  CUresult r = real_cuModuleLoadDataEx(module, image, n, options, values);
  if (r == CUDA_SUCCESS && module && reporting()) layer().module_loaded(*module, image, kir::hook::Vendor::cuda_driver);
  return r;
}

KIR_EXPORT CUresult cuLibraryLoadData(void** library, const void* code, void* jit_options, void** jit_values,
                                      unsigned n_jit, void* library_options, void** library_values,
                                      unsigned n_library) {
  KIR_REAL(cuLibraryLoadData, CUresult (*)(void**, const void*, void*, void**, unsigned, void*, void**, unsigned));
  CUresult r =
      real_cuLibraryLoadData(library, code, jit_options, jit_values, n_jit, library_options, library_values, n_library);
  if (r == CUDA_SUCCESS && library && reporting())
    layer().module_loaded(*library, code, kir::hook::Vendor::cuda_driver, true);
  return r;
}

// Unloads: the layer lets go of the module first (modules it never saw loaded,
// e.g. by cuModuleLoad from a file, are not its business).
KIR_EXPORT CUresult cuModuleUnload(void* module) {
  KIR_REAL(cuModuleUnload, CUresult (*)(void*));
  if (reporting()) layer().fatbin_unregistered(module, nullptr);
  return real_cuModuleUnload(module);
}

KIR_EXPORT CUresult cuLibraryUnload(void* library) {
  KIR_REAL(cuLibraryUnload, CUresult (*)(void*));
  if (reporting()) layer().fatbin_unregistered(library, nullptr);
  return real_cuLibraryUnload(library);
}

KIR_EXPORT CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  KIR_REAL(cuModuleGetFunction, CUresult (*)(void**, void*, const char*));
  CUresult r = real_cuModuleGetFunction(function, module, name);
  if (r == CUDA_SUCCESS && function && reporting()) layer().function_found(module, *function, name);
  return r;
}

KIR_EXPORT CUresult cuLibraryGetKernel(void** kernel, void* library, const char* name) {
  KIR_REAL(cuLibraryGetKernel, CUresult (*)(void**, void*, const char*));
  CUresult r = real_cuLibraryGetKernel(kernel, library, name);
  if (r == CUDA_SUCCESS && kernel && reporting()) layer().function_found(library, *kernel, name);
  return r;
}

/// A library kernel's CUfunction for the current context: launches by it are
/// launches of the same kernel.
KIR_EXPORT CUresult cuKernelGetFunction(void** function, void* kernel) {
  KIR_REAL(cuKernelGetFunction, CUresult (*)(void**, void*));
  CUresult r = real_cuKernelGetFunction(function, kernel);
  if (r == CUDA_SUCCESS && function && *function) layer().function_alias(*function, kernel);
  return r;
}

KIR_EXPORT CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  KIR_REAL(cuLaunchKernel, CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        CUstream, void**, void**));
  return launch(
      "cuLaunchKernel", f, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra,
      [&] { return real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); },
      [&](void* g) { return real_cuLaunchKernel(g, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

/// CUlaunchConfig, as cuLaunchKernelEx takes it.
struct LaunchConfig {
  unsigned gx, gy, gz, bx, by, bz, shared;
  CUstream stream;
  void* attrs;
  unsigned num_attrs;
};

KIR_EXPORT CUresult cuLaunchKernelEx(const LaunchConfig* c, void* f, void** params, void** extra) {
  KIR_REAL(cuLaunchKernelEx, CUresult (*)(const LaunchConfig*, void*, void**, void**));
  if (!c) return real_cuLaunchKernelEx(c, f, params, extra);
  return launch(
      "cuLaunchKernelEx", f, {c->gx, c->gy, c->gz}, {c->bx, c->by, c->bz}, c->shared, c->stream, params, extra,
      [&] { return real_cuLaunchKernelEx(c, f, params, extra); },
      [&](void* g) { return real_cuLaunchKernelEx(c, g, params, extra); });
}

// The per-thread-default-stream variants (what cuGetProcAddress returns for
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, and what code built with
// `--default-stream per-thread` calls): the same report around the real _ptsz call.
KIR_EXPORT CUresult cuLaunchKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  KIR_REAL(cuLaunchKernel_ptsz, CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                             unsigned, CUstream, void**, void**));
  return launch(
      "cuLaunchKernel_ptsz", f, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra,
      [&] { return real_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); },
      [&](void* g) { return real_cuLaunchKernel_ptsz(g, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

KIR_EXPORT CUresult cuLaunchKernelEx_ptsz(const LaunchConfig* c, void* f, void** params, void** extra) {
  KIR_REAL(cuLaunchKernelEx_ptsz, CUresult (*)(const LaunchConfig*, void*, void**, void**));
  if (!c) return real_cuLaunchKernelEx_ptsz(c, f, params, extra);
  return launch(
      "cuLaunchKernelEx_ptsz", f, {c->gx, c->gy, c->gz}, {c->bx, c->by, c->bz}, c->shared, c->stream, params, extra,
      [&] { return real_cuLaunchKernelEx_ptsz(c, f, params, extra); },
      [&](void* g) { return real_cuLaunchKernelEx_ptsz(c, g, params, extra); });
}

/// Allocation calls: the real one, then the tracker when it succeeded and the
/// app (not the runtime on its behalf) made it.
#define KIR_DRIVER_ALLOC(name, kind, size_expr, params, args)                                              \
  KIR_EXPORT CUresult name params {                                                                        \
    KIR_REAL(name, CUresult(*) params);                                                                    \
    return kir::hook::reported_call([&] { return real_##name args; },                                      \
                                    [&] {                                                                  \
                                      if (ptr && *ptr)                                                     \
                                          layer().allocated(kir::hook::address_of(*ptr), size_expr, kind); \
                                    });                                                                    \
  }

KIR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  KIR_REAL(cuMemAlloc_v2, CUresult (*)(CUdeviceptr*, size_t));
  return CUresult(kir::hook::device_alloc(ptr, size, nullptr, [&] { return real_cuMemAlloc_v2(ptr, size); }));
}

KIR_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  KIR_REAL(cuMemAllocAsync, CUresult (*)(CUdeviceptr*, size_t, CUstream));
  return CUresult(kir::hook::device_alloc(ptr, size, stream, [&] { return real_cuMemAllocAsync(ptr, size, stream); }));
}

KIR_DRIVER_ALLOC(cuMemAllocManaged, KIR_ALLOC_MANAGED, size, (CUdeviceptr * ptr, size_t size, unsigned flags),
                 (ptr, size, flags))
KIR_DRIVER_ALLOC(cuMemAllocPitch_v2, KIR_ALLOC_DEVICE, *pitch* height,
                 (CUdeviceptr * ptr, size_t* pitch, size_t width, size_t height, unsigned element),
                 (ptr, pitch, width, height, element))
KIR_DRIVER_ALLOC(cuMemAllocHost_v2, KIR_ALLOC_HOST_PINNED, size, (void** ptr, size_t size), (ptr, size))
KIR_DRIVER_ALLOC(cuMemHostAlloc, KIR_ALLOC_HOST_PINNED, size, (void** ptr, size_t size, unsigned flags),
                 (ptr, size, flags))

KIR_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  KIR_REAL(cuMemFree_v2, CUresult (*)(CUdeviceptr));
  return CUresult(kir::hook::device_free(ptr, nullptr, [&] { return real_cuMemFree_v2(ptr); }));
}

KIR_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  KIR_REAL(cuMemFreeAsync, CUresult (*)(CUdeviceptr, CUstream));
  return CUresult(kir::hook::device_free(ptr, stream, [&] { return real_cuMemFreeAsync(ptr, stream); }));
}

KIR_EXPORT CUresult cuMemFreeHost(void* ptr) {
  KIR_REAL(cuMemFreeHost, CUresult (*)(void*));
  return kir::hook::tracked_free(kir::hook::address_of(ptr), [&] { return real_cuMemFreeHost(ptr); });
}

/// Replace the driver's entry point for `symbol` in `*pfn` by the layer's, when it
/// has one: the plain (legacy default stream) entry points, and the launches'
/// per-thread-default-stream variants (flags 2).
KIR_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
KIR_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags);

/// KIR_HOOK_LOG_PROCS=1: one stderr line per entry point asked of cuGetProcAddress
/// (symbol, version, flags, and whether the layer's own was handed out) — to find
/// out how a library that stays invisible reaches the driver.
static bool log_procs() {
  static const bool on = [] {
    const char* v = kir::hook::setting("KIR_HOOK_LOG_PROCS");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

static void ours_for(const char* symbol, void** pfn, int version, uint64_t flags);

/// ours_for, and with KIR_HOOK_LOG_PROCS the line saying what was handed out.
static void hand_out(const char* symbol, void** pfn, int version, uint64_t flags) {
  if (!log_procs()) return ours_for(symbol, pfn, version, flags);
  void* before = pfn ? *pfn : nullptr;
  ours_for(symbol, pfn, version, flags);
  std::fprintf(stderr, "kir-hook: cuGetProcAddress %s version=%d flags=%llu -> %s\n", symbol ? symbol : "(null)",
               version, static_cast<unsigned long long>(flags),
               pfn && *pfn != before ? "kir" : (pfn && *pfn ? "driver" : "none"));
}

/// The driver entry points the layer interposes: the name cuGetProcAddress is
/// asked for (nullptr: only handed out for the per-thread default stream, below),
/// the name libcuda exports (what a dlsym by handle asks for), and the interposer.
struct Interposer {
  const char* base;
  const char* exported;
  void* fn;
};

static const std::vector<Interposer>& interposers() {
  static const std::vector<Interposer> table = {
      {"cuModuleLoadData", "cuModuleLoadData", reinterpret_cast<void*>(&cuModuleLoadData)},
      {"cuModuleLoadDataEx", "cuModuleLoadDataEx", reinterpret_cast<void*>(&cuModuleLoadDataEx)},
      {"cuModuleLoadFatBinary", "cuModuleLoadFatBinary", reinterpret_cast<void*>(&cuModuleLoadFatBinary)},
      {"cuLibraryLoadData", "cuLibraryLoadData", reinterpret_cast<void*>(&cuLibraryLoadData)},
      {"cuModuleUnload", "cuModuleUnload", reinterpret_cast<void*>(&cuModuleUnload)},
      {"cuLibraryUnload", "cuLibraryUnload", reinterpret_cast<void*>(&cuLibraryUnload)},
      {"cuModuleGetFunction", "cuModuleGetFunction", reinterpret_cast<void*>(&cuModuleGetFunction)},
      {"cuLibraryGetKernel", "cuLibraryGetKernel", reinterpret_cast<void*>(&cuLibraryGetKernel)},
      {"cuKernelGetFunction", "cuKernelGetFunction", reinterpret_cast<void*>(&cuKernelGetFunction)},
      {"cuLaunchKernel", "cuLaunchKernel", reinterpret_cast<void*>(&cuLaunchKernel)},
      {"cuLaunchKernelEx", "cuLaunchKernelEx", reinterpret_cast<void*>(&cuLaunchKernelEx)},
      {nullptr, "cuLaunchKernel_ptsz", reinterpret_cast<void*>(&cuLaunchKernel_ptsz)},
      {nullptr, "cuLaunchKernelEx_ptsz", reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz)},
      {"cuMemAlloc", "cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemAllocManaged", "cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged)},
      {"cuMemAllocAsync", "cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync)},
      {"cuMemAllocPitch", "cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2)},
      {"cuMemAllocHost", "cuMemAllocHost_v2", reinterpret_cast<void*>(&cuMemAllocHost_v2)},
      {"cuMemHostAlloc", "cuMemHostAlloc", reinterpret_cast<void*>(&cuMemHostAlloc)},
      {"cuMemFree", "cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemFreeAsync", "cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync)},
      {"cuMemFreeHost", "cuMemFreeHost", reinterpret_cast<void*>(&cuMemFreeHost)},
  };
  return table;
}

static void ours_for(const char* symbol, void** pfn, int version, uint64_t flags) {
  if (!pfn || !*pfn || !symbol) return;
  constexpr uint64_t kPerThreadDefaultStream = 2;  // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
  if (flags == kPerThreadDefaultStream) {          // only the launches have per-thread variants here
    if (std::strcmp(symbol, "cuLaunchKernel") == 0) *pfn = reinterpret_cast<void*>(&cuLaunchKernel_ptsz);
    if (std::strcmp(symbol, "cuLaunchKernelEx") == 0) *pfn = reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz);
    return;
  }
  if (flags != 0 && flags != 1) return;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    *pfn =
        version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2) : reinterpret_cast<void*>(&cuGetProcAddress);
    return;
  }
  for (const Interposer& i : interposers())
    if (i.base && std::strcmp(symbol, i.base) == 0) *pfn = i.fn;
}

/// Entry points obtained through cuGetProcAddress get the interposed versions:
/// the name (without its _v2/_ptsz suffix choice, which the driver makes from
/// the requested version) selects ours when we have one. cuGetProcAddress itself
/// is one of them: a statically linked runtime asks it for itself (dlsym.cpp).
KIR_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  KIR_REAL(cuGetProcAddress_v2, CUresult (*)(const char*, void**, int, uint64_t, int*));
  CUresult r = real_cuGetProcAddress_v2(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS) hand_out(symbol, pfn, version, flags);
  else if (log_procs())
    std::fprintf(stderr, "kir-hook: cuGetProcAddress %s version=%d flags=%llu -> error %d\n",
                 symbol ? symbol : "(null)", version, static_cast<unsigned long long>(flags), r);
  return r;
}

/// The CUDA 11.3 ABI of the same (no status out-parameter), which runtimes ask
/// for with version 11030.
KIR_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  KIR_REAL(cuGetProcAddress, CUresult (*)(const char*, void**, int, uint64_t));
  CUresult r = real_cuGetProcAddress(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS) hand_out(symbol, pfn, version, flags);
  return r;
}

}  // extern "C"

/// The layer's interposer exported as `name` (the driver's own symbol names,
/// `_v2` and `_ptsz` included), or nullptr: what a library that looks the
/// driver up by handle (dlsym(libcuda, "cuLaunchKernel"): cuFFT does, without
/// a CUDA runtime) is handed instead of the driver's function (dlsym.cpp).
void* kir::hook::driver_interposer(const char* name) {
  for (const Interposer& i : interposers())
    if (std::strcmp(name, i.exported) == 0) return i.fn;
  return nullptr;
}

void kir::hook::log_driver_lookup(const char* how, const char* name, bool ours) {
  if (log_procs()) std::fprintf(stderr, "kir-hook: %s %s -> %s\n", how, name, ours ? "kir" : "not the layer's");
}
