// Interposers for the HIP runtime (libamdhip64.so), the same shape as the CUDA
// runtime's: registrations (the wrapper holds a clang offload bundle of AMDGPU
// code objects), hipLaunchKernel, allocations and frees. Forwarded to the real
// function next in the lookup order or in a loaded libamdhip64; results pass
// through unchanged. No HIP header is needed.
#include <cstddef>
#include <cstdint>

#include "interpose.hpp"

namespace {

using kir::hook::Dim3;
using kir::hook::launch_event;
using kir::hook::tracked_alloc;
using kir::hook::tracked_free;
using hipError_t = int;
using hipStream_t = void*;

#define KIR_REAL(name, type)                              \
  static const auto real_##name = reinterpret_cast<type>( \
      kir::hook::find_real(#name, {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so"}, "HIP runtime"))

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }

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

KIR_EXPORT hipError_t hipMalloc(void** ptr, size_t size) {
  KIR_REAL(hipMalloc, hipError_t (*)(void**, size_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE, [&] { return real_hipMalloc(ptr, size); });
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
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE, [&] { return real_hipMallocAsync(ptr, size, stream); });
}

KIR_EXPORT hipError_t hipFree(void* ptr) {
  KIR_REAL(hipFree, hipError_t (*)(void*));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipFree(ptr); });
}

KIR_EXPORT hipError_t hipHostFree(void* ptr) {
  KIR_REAL(hipHostFree, hipError_t (*)(void*));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipHostFree(ptr); });
}

KIR_EXPORT hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  KIR_REAL(hipFreeAsync, hipError_t (*)(void*, hipStream_t));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipFreeAsync(ptr, stream); });
}

}  // extern "C"
