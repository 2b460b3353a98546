// Interposers for the HIP runtime (libamdhip64.so), the same shape as the CUDA
// runtime's and driver's: registrations (the wrapper holds a clang offload
// bundle of AMDGPU code objects), modules loaded at run time (hipModuleLoad*,
// hipModuleGetFunction, hipModuleUnload: as cuModuleLoadData's), the launch
// paths, allocations and frees. Forwarded to the real function next in the
// lookup order or in a loaded libamdhip64; results pass through unchanged. No
// HIP header is needed: every signature is ROCm's hip/hip_runtime_api.h (or
// hip/hip_ext.h), the same in ROCm 5.2 (Debian's libamdhip64-dev 5.2.3) and
// 6.x (ROCm/HIP include/hip, ROCm/clr hipamd/src/hip_module.cpp) unless said.
//
// hipLaunchKernelGGL is no entry point: ROCm's hip/amd_detail/amd_hip_runtime.h
// defines it as a macro expanding to `kernel<<<grid, block, shared, stream>>>(...)`
// (hipLaunchKernelGGLInternal), which clang lowers to the kernel's host stub,
// whose body calls hipLaunchKernel: seen here as hipLaunchKernel.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "interpose.hpp"

namespace {

using kir::hook::Dim3;
using kir::hook::launch_event;
using kir::hook::tracked_alloc;
using kir::hook::tracked_free;
using hipError_t = int;
using hipStream_t = void*;
using hipEvent_t = void*;
constexpr hipError_t hipSuccess = 0;

#define KIR_REAL(name, type)                                                   \
  static const auto real_##name = reinterpret_cast<type>(kir::hook::find_real( \
      #name, {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}, "HIP runtime"))

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }
bool reporting() { return !kir::hook::RuntimeCall::active(); }

int synchronize(void* stream) {
  KIR_REAL(hipStreamSynchronize, hipError_t (*)(hipStream_t));
  return real_hipStreamSynchronize(stream);
}
int enqueue_host(void* stream, void (*fn)(void*), void* data) {
  KIR_REAL(hipLaunchHostFunc, hipError_t (*)(hipStream_t, void (*)(void*), void*));
  return real_hipLaunchHostFunc(stream, fn, data);
}
const kir::hook::StreamOps kStreamOps{synchronize, enqueue_host};

int symbol_address(void** device, const void* host) {
  KIR_REAL(hipGetSymbolAddress, hipError_t (*)(void**, const void*));
  return real_hipGetSymbolAddress(device, host);
}

/// A launch of a hipFunction_t (hipModuleLaunchKernel and its kin): the kernel
/// looked up with hipModuleGetFunction, its arguments from `params` or from
/// `extra`'s packed buffer (HIP_LAUNCH_PARAM_END is (void*)3).
template <class Call, class Substitute>
hipError_t module_launch(const char* api, const void* f, Dim3 grid, Dim3 block, size_t shared, hipStream_t stream,
                         void** params, void** extra, Call&& call, Substitute&& substitute) {
  if (!reporting()) return call();
  void* slots[64];
  void** args = params;
  if (!params && layer().has_clients())
    args = kir::hook::unpack_extra(extra, layer().kernel_view(f), slots, reinterpret_cast<void*>(3));
  return kir::hook::claimable_launch(launch_event(api, f, grid, block, shared, stream, args), &kStreamOps,
                                     kir::hook::Vendor::hip, call, substitute);
}

/// hipExtModuleLaunchKernel's grid is in work-items (globalWorkSize), not blocks:
/// the blocks it launches, rounded up (HIP launches partial work-groups).
unsigned blocks(uint32_t global, uint32_t local) {
  return local ? unsigned((uint64_t(global) + local - 1) / local) : 0;
}

/// hipExtModuleLaunchKernel (ROCm hip/hip_ext.h): `extern "C"` in ROCm 6.x
/// (ROCm/HIP include/hip/hip_ext.h), a C++ function in ROCm 5.2 (Debian's
/// libamdhip64.so.5 exports `_Z24hipExtModuleLaunchKernel...`): both interposed.
using ExtModuleLaunch = hipError_t (*)(void*, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t,
                                       hipStream_t, void**, void**, hipEvent_t, hipEvent_t, uint32_t);

hipError_t ext_module_launch(const char* api, ExtModuleLaunch real, void* f, uint32_t gx, uint32_t gy, uint32_t gz,
                             uint32_t lx, uint32_t ly, uint32_t lz, size_t shared, hipStream_t stream, void** params,
                             void** extra, hipEvent_t start, hipEvent_t stop, uint32_t flags) {
  return module_launch(
      api, f, {blocks(gx, lx), blocks(gy, ly), blocks(gz, lz)}, {lx, ly, lz}, shared, stream, params, extra,
      [&] { return real(f, gx, gy, gz, lx, ly, lz, shared, stream, params, extra, start, stop, flags); },
      [&](void* g) { return real(g, gx, gy, gz, lx, ly, lz, shared, stream, params, extra, start, stop, flags); });
}

/// A module call the app made: the real one, inside a RuntimeCall (a runtime whose
/// hipModuleLoadDataEx calls its exported hipModuleLoadData reaches the layer's
/// interposer again: reported once), then `seen()` when it succeeded.
template <class Call, class Seen>
hipError_t module_call(Call&& call, Seen&& seen) {
  if (!reporting()) return call();
  hipError_t r;
  {
    kir::hook::RuntimeCall inside;
    r = call();
  }
  if (r == hipSuccess) seen();
  return r;
}

#define KIR_EXT_MODULE_LAUNCH_MANGLED \
  "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j"

}  // namespace

extern "C" {

KIR_EXPORT void** __hipRegisterFatBinary(const void* wrapper) {
  KIR_REAL(__hipRegisterFatBinary, void** (*)(const void*));
  void** handle = real___hipRegisterFatBinary(wrapper);
  layer().fatbin_registered(handle, wrapper, kir::hook::Vendor::hip);
  return handle;
}

KIR_EXPORT void __hipUnregisterFatBinary(void** handle) {
  KIR_REAL(__hipUnregisterFatBinary, void (*)(void**));
  layer().fatbin_unregistered(handle, "__hipUnregisterFatBinary");
  real___hipUnregisterFatBinary(handle);
}

KIR_EXPORT void __hipRegisterFunction(void** handle, const void* host_fun, char* device_fun, const char* device_name,
                                      unsigned thread_limit, void* tid, void* bid, void* block_dim, void* grid_dim,
                                      int* warp_size) {
  KIR_REAL(__hipRegisterFunction,
           void (*)(void**, const void*, char*, const char*, unsigned, void*, void*, void*, void*, int*));
  real___hipRegisterFunction(handle, host_fun, device_fun, device_name, thread_limit, tid, bid, block_dim, grid_dim,
                             warp_size);
  layer().kernel_registered(handle, host_fun, device_name ? device_name : device_fun);
}

KIR_EXPORT void __hipRegisterVar(void** handle, void* host_var, char* device_address, const char* device_name, int ext,
                                 size_t size, int constant, int global) {
  KIR_REAL(__hipRegisterVar, void (*)(void**, void*, char*, const char*, int, size_t, int, int));
  real___hipRegisterVar(handle, host_var, device_address, device_name, ext, size, constant, global);
  layer().global_registered(handle, host_var, device_name, size, symbol_address);
}

KIR_EXPORT hipError_t hipLaunchKernel(const void* func, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                      hipStream_t stream) {
  KIR_REAL(hipLaunchKernel, hipError_t (*)(const void*, Dim3, Dim3, void**, size_t, hipStream_t));
  return kir::hook::claimable_launch(
      launch_event("hipLaunchKernel", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      kir::hook::Vendor::hip, [&] { return real_hipLaunchKernel(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) { return kir::hook::hip_module_launch(f, grid, block, unsigned(shared_bytes), stream, args); });
}

// hipLaunchKernelGGL's lowering (see the top), hipExtLaunchKernel and the
// cooperative launch: launches by host stub, like hipLaunchKernel. A claimed
// substitute runs through the module launch of the same kind (hipExtModuleLaunchKernel
// with the app's events and flags; hipModuleLaunchCooperativeKernel, ROCm 6.x only:
// ROCm 5.2's headers have none, and its launch then returns hipErrorNotFound).

/// hipExtLaunchKernel(const void* function_address, dim3 numBlocks, dim3 dimBlocks, void** args,
/// size_t sharedMemBytes, hipStream_t stream, hipEvent_t startEvent, hipEvent_t stopEvent, int flags).
KIR_EXPORT hipError_t hipExtLaunchKernel(const void* func, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                         hipStream_t stream, hipEvent_t start, hipEvent_t stop, int flags) {
  KIR_REAL(hipExtLaunchKernel,
           hipError_t (*)(const void*, Dim3, Dim3, void**, size_t, hipStream_t, hipEvent_t, hipEvent_t, int));
  return kir::hook::claimable_launch(
      launch_event("hipExtLaunchKernel", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      kir::hook::Vendor::hip,
      [&] { return real_hipExtLaunchKernel(func, grid, block, args, shared_bytes, stream, start, stop, flags); },
      [&](void* f) {
        return kir::hook::hip_ext_module_launch(f, grid, block, shared_bytes, stream, args, start, stop,
                                                unsigned(flags));
      });
}

/// hipLaunchCooperativeKernel(const void* f, dim3 gridDim, dim3 blockDimX, void** kernelParams,
/// unsigned int sharedMemBytes, hipStream_t stream).
KIR_EXPORT hipError_t hipLaunchCooperativeKernel(const void* func, Dim3 grid, Dim3 block, void** args,
                                                 unsigned shared_bytes, hipStream_t stream) {
  KIR_REAL(hipLaunchCooperativeKernel, hipError_t (*)(const void*, Dim3, Dim3, void**, unsigned, hipStream_t));
  return kir::hook::claimable_launch(
      launch_event("hipLaunchCooperativeKernel", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      kir::hook::Vendor::hip,
      [&] { return real_hipLaunchCooperativeKernel(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) { return kir::hook::hip_module_launch_cooperative(f, grid, block, shared_bytes, stream, args); });
}

// ---- Modules (the driver-style API: hipModule*) ----------------------------

/// hipModuleLoadData(hipModule_t* module, const void* image): `image` is an AMDGPU
/// code object or a clang offload bundle, plain or CCOB (VendorTraits::read_module).
KIR_EXPORT hipError_t hipModuleLoadData(void** module, const void* image) {
  KIR_REAL(hipModuleLoadData, hipError_t (*)(void**, const void*));
  return module_call([&] { return real_hipModuleLoadData(module, image); },
                     [&] {
                       if (module) layer().module_loaded(*module, image, kir::hook::Vendor::hip);
                     });
}

/// hipModuleLoadDataEx(hipModule_t* module, const void* image, unsigned int numOptions,
/// hipJitOption* options, void** optionValues).
KIR_EXPORT hipError_t hipModuleLoadDataEx(void** module, const void* image, unsigned n, void* options, void** values) {
  KIR_REAL(hipModuleLoadDataEx, hipError_t (*)(void**, const void*, unsigned, void*, void**));
  return module_call([&] { return real_hipModuleLoadDataEx(module, image, n, options, values); },
                     [&] {
                       if (module) layer().module_loaded(*module, image, kir::hook::Vendor::hip);
                     });
}

/// hipModuleLoad(hipModule_t* module, const char* fname): the file the runtime
/// loaded, read again (after the runtime accepted it) and seen as hipModuleLoadData's image.
KIR_EXPORT hipError_t hipModuleLoad(void** module, const char* fname) {
  KIR_REAL(hipModuleLoad, hipError_t (*)(void**, const char*));
  return module_call([&] { return real_hipModuleLoad(module, fname); },
                     [&] {
                       if (!module || !fname) return;
                       std::ifstream in(fname, std::ios::binary);
                       std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                       bytes.push_back(0);  // an empty or unreadable file is no image: read_module says so
                       layer().module_loaded(*module, bytes.data(), kir::hook::Vendor::hip);
                     });
}

/// hipModuleUnload(hipModule_t module): the layer lets go of the module first.
KIR_EXPORT hipError_t hipModuleUnload(void* module) {
  KIR_REAL(hipModuleUnload, hipError_t (*)(void*));
  if (!reporting()) return real_hipModuleUnload(module);
  layer().fatbin_unregistered(module, nullptr);
  kir::hook::RuntimeCall inside;
  return real_hipModuleUnload(module);
}

/// hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname).
KIR_EXPORT hipError_t hipModuleGetFunction(void** function, void* module, const char* name) {
  KIR_REAL(hipModuleGetFunction, hipError_t (*)(void**, void*, const char*));
  return module_call([&] { return real_hipModuleGetFunction(function, module, name); },
                     [&] {
                       if (function) layer().function_found(module, *function, name);
                     });
}

/// hipModuleLaunchKernel(hipFunction_t f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX,
/// blockDimY, blockDimZ, unsigned sharedMemBytes, hipStream_t stream, void** kernelParams, void** extra).
KIR_EXPORT hipError_t hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                            unsigned bz, unsigned shared, hipStream_t stream, void** params,
                                            void** extra) {
  KIR_REAL(hipModuleLaunchKernel, hipError_t (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                 unsigned, hipStream_t, void**, void**));
  return module_launch(
      "hipModuleLaunchKernel", f, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra,
      [&] { return real_hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); },
      [&](void* g) { return real_hipModuleLaunchKernel(g, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

/// hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned gridDimX..blockDimZ, unsigned
/// sharedMemBytes, hipStream_t stream, void** kernelParams): ROCm 6.x (ROCm/HIP
/// include/hip/hip_runtime_api.h; absent from ROCm 5.2).
KIR_EXPORT hipError_t hipModuleLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                       unsigned by, unsigned bz, unsigned shared, hipStream_t stream,
                                                       void** params) {
  KIR_REAL(hipModuleLaunchCooperativeKernel, hipError_t (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                            unsigned, unsigned, hipStream_t, void**));
  return module_launch(
      "hipModuleLaunchCooperativeKernel", f, {gx, gy, gz}, {bx, by, bz}, shared, stream, params, nullptr,
      [&] { return real_hipModuleLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params); },
      [&](void* g) {
        return real_hipModuleLaunchCooperativeKernel(g, gx, gy, gz, bx, by, bz, shared, stream, params);
      });
}

KIR_EXPORT hipError_t hipExtModuleLaunchKernel(void* f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                               uint32_t lz, size_t shared, hipStream_t stream, void** params,
                                               void** extra, hipEvent_t start, hipEvent_t stop, uint32_t flags) {
  KIR_REAL(hipExtModuleLaunchKernel, ExtModuleLaunch);
  return ext_module_launch("hipExtModuleLaunchKernel", real_hipExtModuleLaunchKernel, f, gx, gy, gz, lx, ly, lz, shared,
                           stream, params, extra, start, stop, flags);
}

KIR_EXPORT hipError_t hip_ext_module_launch_cxx(void* f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                                uint32_t ly, uint32_t lz, size_t shared, hipStream_t stream,
                                                void** params, void** extra, hipEvent_t start, hipEvent_t stop,
                                                uint32_t flags) __asm__(KIR_EXT_MODULE_LAUNCH_MANGLED);
KIR_EXPORT hipError_t hip_ext_module_launch_cxx(void* f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                                uint32_t ly, uint32_t lz, size_t shared, hipStream_t stream,
                                                void** params, void** extra, hipEvent_t start, hipEvent_t stop,
                                                uint32_t flags) {
  static const auto real = reinterpret_cast<ExtModuleLaunch>(
      kir::hook::find_real(KIR_EXT_MODULE_LAUNCH_MANGLED, {"libamdhip64.so.5", "libamdhip64.so"}, "HIP runtime"));
  return ext_module_launch("hipExtModuleLaunchKernel", real, f, gx, gy, gz, lx, ly, lz, shared, stream, params, extra,
                           start, stop, flags);
}

// ---- Allocations -----------------------------------------------------------

KIR_EXPORT hipError_t hipMalloc(void** ptr, size_t size) {
  KIR_REAL(hipMalloc, hipError_t (*)(void**, size_t));
  // A client allocator (the recorder's VA range) serves it when it takes it, as cudaMalloc's.
  return kir::hook::device_alloc(ptr, size, nullptr, [&] { return real_hipMalloc(ptr, size); });
}

KIR_EXPORT hipError_t hipMallocManaged(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(hipMallocManaged, hipError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_MANAGED, [&] { return real_hipMallocManaged(ptr, size, flags); });
}

KIR_EXPORT hipError_t hipHostMalloc(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(hipHostMalloc, hipError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_hipHostMalloc(ptr, size, flags); });
}

KIR_EXPORT hipError_t hipMallocAsync(void** ptr, size_t size, hipStream_t stream) {
  KIR_REAL(hipMallocAsync, hipError_t (*)(void**, size_t, hipStream_t));
  return kir::hook::device_alloc(ptr, size, stream, [&] { return real_hipMallocAsync(ptr, size, stream); });
}

/// hipMallocFromPoolAsync(void** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream).
KIR_EXPORT hipError_t hipMallocFromPoolAsync(void** ptr, size_t size, void* pool, hipStream_t stream) {
  KIR_REAL(hipMallocFromPoolAsync, hipError_t (*)(void**, size_t, void*, hipStream_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE,
                       [&] { return real_hipMallocFromPoolAsync(ptr, size, pool, stream); });
}

/// hipExtMallocWithFlags(void** ptr, size_t sizeBytes, unsigned int flags): device memory
/// (hipDeviceMallocDefault, hipDeviceMallocFinegrained, hipDeviceMallocUncached, ...).
KIR_EXPORT hipError_t hipExtMallocWithFlags(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(hipExtMallocWithFlags, hipError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE, [&] { return real_hipExtMallocWithFlags(ptr, size, flags); });
}

/// hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height): `*pitch * height` bytes.
KIR_EXPORT hipError_t hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  KIR_REAL(hipMallocPitch, hipError_t (*)(void**, size_t*, size_t, size_t));
  return kir::hook::reported_call([&] { return real_hipMallocPitch(ptr, pitch, width, height); },
                                  [&] {
                                    if (ptr && *ptr && pitch)
                                      layer().allocated(kir::hook::address_of(*ptr), *pitch * height, KIR_ALLOC_DEVICE);
                                  });
}

// Virtual memory management: what a kernel can reach is a mapped range, so a
// hipMemMap is the allocation (device memory at `ptr`, `size` bytes) and its
// hipMemUnmap the free. hipMemAddressReserve (an address range, nothing behind
// it) and hipMemCreate (memory without an address) are not allocations by
// themselves and are passed through untouched.

/// hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
/// unsigned long long flags) (ROCm 5.1+).
KIR_EXPORT hipError_t hipMemMap(void* ptr, size_t size, size_t offset, void* handle, unsigned long long flags) {
  KIR_REAL(hipMemMap, hipError_t (*)(void*, size_t, size_t, void*, unsigned long long));
  return kir::hook::reported_call([&] { return real_hipMemMap(ptr, size, offset, handle, flags); },
                                  [&] {
                                    if (ptr) layer().allocated(kir::hook::address_of(ptr), size, KIR_ALLOC_DEVICE);
                                  });
}

/// hipMemUnmap(void* ptr, size_t size).
KIR_EXPORT hipError_t hipMemUnmap(void* ptr, size_t size) {
  KIR_REAL(hipMemUnmap, hipError_t (*)(void*, size_t));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipMemUnmap(ptr, size); });
}

KIR_EXPORT hipError_t hipFree(void* ptr) {
  KIR_REAL(hipFree, hipError_t (*)(void*));
  return kir::hook::device_free(kir::hook::address_of(ptr), nullptr, [&] { return real_hipFree(ptr); });
}

KIR_EXPORT hipError_t hipHostFree(void* ptr) {
  KIR_REAL(hipHostFree, hipError_t (*)(void*));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipHostFree(ptr); });
}

KIR_EXPORT hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  KIR_REAL(hipFreeAsync, hipError_t (*)(void*, hipStream_t));
  return kir::hook::device_free(kir::hook::address_of(ptr), stream, [&] { return real_hipFreeAsync(ptr, stream); });
}

}  // extern "C"
