// Interposers for the CUDA runtime API (libcudart.so): each records what
// happens in the hook layer and forwards to the real function, found next in
// the lookup order (RTLD_NEXT) or, when the runtime was dlopen'ed, in it. Return
// values pass through unchanged. No CUDA header is needed: the few types the
// ABI uses are declared here.
#include <cstddef>
#include <cstdint>

#include "interpose.hpp"

namespace {

using kir::hook::claimable_launch;
using kir::hook::Dim3;
using kir::hook::launch_event;
using kir::hook::reported_call;
using kir::hook::tracked_alloc;
using kir::hook::tracked_free;
using kir::hook::Vendor;
using cudaError_t = int;
using cudaStream_t = void*;

#define KIR_REAL(name, type)                              \
  static const auto real_##name = reinterpret_cast<type>( \
      kir::hook::find_real(#name, {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, "CUDA runtime"))

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }

/// The runtime's stream waits, for clients that want completion when the kernel is done.
int synchronize(void* stream) {
  KIR_REAL(cudaStreamSynchronize, cudaError_t (*)(cudaStream_t));
  return real_cudaStreamSynchronize(stream);
}
int enqueue_host(void* stream, void (*fn)(void*), void* data) {
  KIR_REAL(cudaLaunchHostFunc, cudaError_t (*)(cudaStream_t, void (*)(void*), void*));
  return real_cudaLaunchHostFunc(stream, fn, data);
}
const kir::hook::StreamOps kStreamOps{synchronize, enqueue_host};

int symbol_address(void** device, const void* host) {
  KIR_REAL(cudaGetSymbolAddress, cudaError_t (*)(void**, const void*));
  return real_cudaGetSymbolAddress(device, host);
}

}  // namespace

extern "C" {

KIR_EXPORT void** __cudaRegisterFatBinary(void* wrapper) {
  KIR_REAL(__cudaRegisterFatBinary, void** (*)(void*));
  void** handle = real___cudaRegisterFatBinary(wrapper);
  layer().fatbin_registered(handle, wrapper, kir::hook::Vendor::cuda_runtime);
  return handle;
}

KIR_EXPORT void __cudaRegisterFatBinaryEnd(void** handle) {
  KIR_REAL(__cudaRegisterFatBinaryEnd, void (*)(void**));
  real___cudaRegisterFatBinaryEnd(handle);
}

// Run as a library is dlclose'd (or at exit): the layer lets go of the image
// before the runtime does, while it is still mapped.
KIR_EXPORT void __cudaUnregisterFatBinary(void** handle) {
  KIR_REAL(__cudaUnregisterFatBinary, void (*)(void**));
  layer().fatbin_unregistered(handle, "__cudaUnregisterFatBinary");
  real___cudaUnregisterFatBinary(handle);
}

KIR_EXPORT void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun, const char* device_name,
                                       int thread_limit, void* tid, void* bid, void* block_dim, void* grid_dim,
                                       int* warp_size) {
  KIR_REAL(__cudaRegisterFunction,
           void (*)(void**, const char*, char*, const char*, int, void*, void*, void*, void*, int*));
  real___cudaRegisterFunction(handle, host_fun, device_fun, device_name, thread_limit, tid, bid, block_dim, grid_dim,
                              warp_size);
  layer().kernel_registered(handle, host_fun, device_name ? device_name : device_fun);
}

KIR_EXPORT void __cudaRegisterVar(void** handle, char* host_var, char* device_address, const char* device_name, int ext,
                                  size_t size, int constant, int global) {
  KIR_REAL(__cudaRegisterVar, void (*)(void**, char*, char*, const char*, int, size_t, int, int));
  real___cudaRegisterVar(handle, host_var, device_address, device_name, ext, size, constant, global);
  layer().global_registered(handle, host_var, device_name, size, symbol_address);
}

KIR_EXPORT void __cudaRegisterManagedVar(void** handle, void** host_var_address, char* device_address,
                                         const char* device_name, int ext, size_t size, int constant, int global) {
  KIR_REAL(__cudaRegisterManagedVar, void (*)(void**, void**, char*, const char*, int, size_t, int, int));
  real___cudaRegisterManagedVar(handle, host_var_address, device_address, device_name, ext, size, constant, global);
  layer().global_registered(handle, host_var_address, device_name, size, symbol_address);
}

// Launches (API 4: a client may claim them; a substitute is launched through the
// driver with the app's configuration, see kir/hooks.h "Launch override").
KIR_EXPORT cudaError_t cudaLaunchKernel(const void* func, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                        cudaStream_t stream) {
  KIR_REAL(cudaLaunchKernel, cudaError_t (*)(const void*, Dim3, Dim3, void**, size_t, cudaStream_t));
  return claimable_launch(
      launch_event("cudaLaunchKernel", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      Vendor::cuda_runtime, [&] { return real_cudaLaunchKernel(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::driver_launch(f, grid, block, unsigned(shared_bytes), stream, args, nullptr, false);
      });
}

// What code built with `--default-stream per-thread` calls.
KIR_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                             cudaStream_t stream) {
  KIR_REAL(cudaLaunchKernel_ptsz, cudaError_t (*)(const void*, Dim3, Dim3, void**, size_t, cudaStream_t));
  return claimable_launch(
      launch_event("cudaLaunchKernel_ptsz", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      Vendor::cuda_runtime, [&] { return real_cudaLaunchKernel_ptsz(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::driver_launch(f, grid, block, unsigned(shared_bytes), stream, args, nullptr, true);
      });
}

/// cudaLaunchKernelExC's config: grid, block, shared memory, stream, then attributes.
struct LaunchConfig {
  Dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  void* attrs;
  unsigned num_attrs;
};

/// CUlaunchConfig: the driver's twin (cudaLaunchAttribute and CUlaunchAttribute
/// share their layout and ids, so the app's attributes pass as they are).
struct DriverLaunchConfig {
  unsigned gx, gy, gz, bx, by, bz, shared;
  void* stream;
  void* attrs;
  unsigned num_attrs;
};

KIR_EXPORT cudaError_t cudaLaunchKernelExC(const LaunchConfig* config, const void* func, void** args) {
  KIR_REAL(cudaLaunchKernelExC, cudaError_t (*)(const LaunchConfig*, const void*, void**));
  if (!config) return real_cudaLaunchKernelExC(config, func, args);
  return claimable_launch(
      launch_event("cudaLaunchKernelExC", func, config->grid, config->block, config->shared_bytes, config->stream,
                   args),
      &kStreamOps, Vendor::cuda_runtime, [&] { return real_cudaLaunchKernelExC(config, func, args); },
      [&](void* f) {
        DriverLaunchConfig c{config->grid.x,
                             config->grid.y,
                             config->grid.z,
                             config->block.x,
                             config->block.y,
                             config->block.z,
                             unsigned(config->shared_bytes),
                             config->stream,
                             config->attrs,
                             config->num_attrs};
        return kir::hook::driver_launch_ex(&c, f, args, nullptr, false);
      });
}

KIR_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, Dim3 grid, Dim3 block, void** args,
                                                   size_t shared_bytes, cudaStream_t stream) {
  KIR_REAL(cudaLaunchCooperativeKernel, cudaError_t (*)(const void*, Dim3, Dim3, void**, size_t, cudaStream_t));
  return claimable_launch(
      launch_event("cudaLaunchCooperativeKernel", func, grid, block, shared_bytes, stream, args), &kStreamOps,
      Vendor::cuda_runtime,
      [&] { return real_cudaLaunchCooperativeKernel(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::driver_launch_cooperative(f, grid, block, unsigned(shared_bytes), stream, args);
      });
}

// CUDA 13's <<<>>>: the launch site asks once for the kernel handle of its host
// stub (__cudaGetKernel), then launches by that handle. The layer keeps the
// handle -> stub map, so these launches reach clients by their stub like any other.
KIR_EXPORT cudaError_t __cudaGetKernel(void** kernel, const void* stub) {
  KIR_REAL(__cudaGetKernel, cudaError_t (*)(void**, const void*));
  cudaError_t r;
  {
    // It loads the module lazily (cuLibraryLoadData, cuLibraryGetKernel): the runtime's
    // work on the app's registered fatbin, which the layer knows already.
    kir::hook::RuntimeCall inside;
    r = real___cudaGetKernel(kernel, stub);
  }
  if (r == 0 && kernel && *kernel) layer().kernel_handle_found(*kernel, stub);
  return r;
}

KIR_EXPORT cudaError_t __cudaLaunchKernel(void* kernel, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                          cudaStream_t stream) {
  KIR_REAL(__cudaLaunchKernel, cudaError_t (*)(void*, Dim3, Dim3, void**, size_t, cudaStream_t));
  return claimable_launch(
      launch_event("__cudaLaunchKernel", layer().stub_of_handle(kernel), grid, block, shared_bytes, stream, args),
      &kStreamOps, Vendor::cuda_runtime,
      [&] { return real___cudaLaunchKernel(kernel, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::driver_launch(f, grid, block, unsigned(shared_bytes), stream, args, nullptr, false);
      });
}

KIR_EXPORT cudaError_t __cudaLaunchKernel_ptsz(void* kernel, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                               cudaStream_t stream) {
  KIR_REAL(__cudaLaunchKernel_ptsz, cudaError_t (*)(void*, Dim3, Dim3, void**, size_t, cudaStream_t));
  return claimable_launch(
      launch_event("__cudaLaunchKernel_ptsz", layer().stub_of_handle(kernel), grid, block, shared_bytes, stream, args),
      &kStreamOps, Vendor::cuda_runtime,
      [&] { return real___cudaLaunchKernel_ptsz(kernel, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::driver_launch(f, grid, block, unsigned(shared_bytes), stream, args, nullptr, true);
      });
}

KIR_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  KIR_REAL(cudaMalloc, cudaError_t (*)(void**, size_t));
  return kir::hook::device_alloc(ptr, size, nullptr, [&] { return real_cudaMalloc(ptr, size); });
}

KIR_EXPORT cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(cudaMallocManaged, cudaError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_MANAGED, [&] { return real_cudaMallocManaged(ptr, size, flags); });
}

KIR_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  KIR_REAL(cudaMallocHost, cudaError_t (*)(void**, size_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_cudaMallocHost(ptr, size); });
}

KIR_EXPORT cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(cudaHostAlloc, cudaError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_cudaHostAlloc(ptr, size, flags); });
}

KIR_EXPORT cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  KIR_REAL(cudaMallocAsync, cudaError_t (*)(void**, size_t, cudaStream_t));
  return kir::hook::device_alloc(ptr, size, stream, [&] { return real_cudaMallocAsync(ptr, size, stream); });
}

KIR_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, void* pool, cudaStream_t stream) {
  KIR_REAL(cudaMallocFromPoolAsync, cudaError_t (*)(void**, size_t, void*, cudaStream_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_DEVICE,
                       [&] { return real_cudaMallocFromPoolAsync(ptr, size, pool, stream); });
}

KIR_EXPORT cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  KIR_REAL(cudaMallocPitch, cudaError_t (*)(void**, size_t*, size_t, size_t));
  return reported_call([&] { return real_cudaMallocPitch(ptr, pitch, width, height); },
                       [&] {
                         if (ptr && *ptr && pitch)
                           layer().allocated(kir::hook::address_of(*ptr), *pitch * height, KIR_ALLOC_DEVICE);
                       });
}

/// cudaPitchedPtr and cudaExtent, as cudaMalloc3D uses them.
struct PitchedPtr {
  void* ptr;
  size_t pitch, xsize, ysize;
};
struct Extent {
  size_t width, height, depth;
};

KIR_EXPORT cudaError_t cudaMalloc3D(PitchedPtr* out, Extent extent) {
  KIR_REAL(cudaMalloc3D, cudaError_t (*)(PitchedPtr*, Extent));
  return reported_call([&] { return real_cudaMalloc3D(out, extent); },
                       [&] {
                         if (out && out->ptr)
                           layer().allocated(kir::hook::address_of(out->ptr), out->pitch * extent.height * extent.depth,
                                             KIR_ALLOC_DEVICE);
                       });
}

KIR_EXPORT cudaError_t cudaSetDevice(int device) {
  KIR_REAL(cudaSetDevice, cudaError_t (*)(int));
  return real_cudaSetDevice(device);
}

KIR_EXPORT cudaError_t cudaFree(void* ptr) {
  KIR_REAL(cudaFree, cudaError_t (*)(void*));
  return kir::hook::device_free(kir::hook::address_of(ptr), nullptr, [&] { return real_cudaFree(ptr); });
}

KIR_EXPORT cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  KIR_REAL(cudaFreeAsync, cudaError_t (*)(void*, cudaStream_t));
  return kir::hook::device_free(kir::hook::address_of(ptr), stream, [&] { return real_cudaFreeAsync(ptr, stream); });
}

KIR_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  KIR_REAL(cudaFreeHost, cudaError_t (*)(void*));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_cudaFreeHost(ptr); });
}

}  // extern "C"
