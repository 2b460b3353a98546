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
#include <cstring>
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

/// The stream a `_spt` launch runs on: the app's, or for the default stream (nullptr)
/// the calling thread's, hipStreamPerThread ((hipStream_t)2: 5.2 hip_runtime_api.h
/// l. 704, 6.3 l. 932). A substitute of a `_spt` launch and the layer's waits use it.
hipStream_t per_thread(hipStream_t stream) { return stream ? stream : reinterpret_cast<hipStream_t>(2); }
int synchronize_per_thread(void* stream) { return synchronize(per_thread(stream)); }
int enqueue_host_per_thread(void* stream, void (*fn)(void*), void* data) {
  return enqueue_host(per_thread(stream), fn, data);
}
const kir::hook::StreamOps kPerThreadStreamOps{synchronize_per_thread, enqueue_host_per_thread};

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

/// The bytes of the file a runtime loaded (hipModuleLoad, hipLibraryLoadFromFile), read
/// again after it accepted it, and a NUL: an empty or unreadable file is no image
/// (read_module says so).
std::vector<char> file_bytes(const char* fname) {
  std::ifstream in(fname, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back(0);
  return bytes;
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

// The per-thread-default-stream variants (`_spt`): what clang's kernel stubs call
// under -fgpu-default-stream=per-thread (clang/lib/CodeGen/CGCUDANV.cpp,
// emitDeviceStubBodyNew: "hipLaunchKernel_spt") and what hip/amd_detail/
// amd_hip_runtime_pt_api.h maps hipLaunchKernel and hipLaunchCooperativeKernel to
// under HIP_API_PER_THREAD_DEFAULT_STREAM. Declared there in ROCm 5.2 (l. 103, 109;
// libamdhip64.so.5 exports both, version hip_5.2) and 6.3 (ROCm/clr
// hipamd/include/hip/amd_detail/amd_hip_runtime_pt_api.h l. 173, 178); no other
// launch has one. Reported with the app's stream; a substitute runs on the
// per-thread stream when the app's is the default one.

/// hipLaunchKernel_spt(const void* function_address, dim3 numBlocks, dim3 dimBlocks, void** args,
/// size_t sharedMemBytes, hipStream_t stream).
KIR_EXPORT hipError_t hipLaunchKernel_spt(const void* func, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                          hipStream_t stream) {
  KIR_REAL(hipLaunchKernel_spt, hipError_t (*)(const void*, Dim3, Dim3, void**, size_t, hipStream_t));
  return kir::hook::claimable_launch(
      launch_event("hipLaunchKernel_spt", func, grid, block, shared_bytes, stream, args), &kPerThreadStreamOps,
      kir::hook::Vendor::hip, [&] { return real_hipLaunchKernel_spt(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::hip_module_launch(f, grid, block, unsigned(shared_bytes), per_thread(stream), args);
      });
}

/// hipLaunchCooperativeKernel_spt(const void* f, dim3 gridDim, dim3 blockDim, void** kernelParams,
/// uint32_t sharedMemBytes, hipStream_t hStream).
KIR_EXPORT hipError_t hipLaunchCooperativeKernel_spt(const void* func, Dim3 grid, Dim3 block, void** args,
                                                     uint32_t shared_bytes, hipStream_t stream) {
  KIR_REAL(hipLaunchCooperativeKernel_spt, hipError_t (*)(const void*, Dim3, Dim3, void**, uint32_t, hipStream_t));
  return kir::hook::claimable_launch(
      launch_event("hipLaunchCooperativeKernel_spt", func, grid, block, shared_bytes, stream, args),
      &kPerThreadStreamOps, kir::hook::Vendor::hip,
      [&] { return real_hipLaunchCooperativeKernel_spt(func, grid, block, args, shared_bytes, stream); },
      [&](void* f) {
        return kir::hook::hip_module_launch_cooperative(f, grid, block, shared_bytes, per_thread(stream), args);
      });
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
                       std::vector<char> bytes = file_bytes(fname);
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

// ---- Libraries (ROCm 7.x: hipLibrary*, CUDA's cuLibrary* counterparts) ------
// Declared in ROCm 7.x's hip/hip_runtime_api.h and defined in ROCm/rocm-systems
// projects/clr/hipamd/src/hip_library.cpp (at 04c29c51): hipLibraryLoadData keeps
// the app's image and loads it on first use (LibraryContainer::BuildIt), so the
// layer reads the image when the load returns, as hipModuleLoadData's; a library's
// kernels (hipLibraryGetKernel) are launched with hipModuleLaunchKernel & co. by
// their hipKernel_t or by the hipFunction_t hipKernelGetFunction makes of it (the
// same pointer there: `*pFunc = reinterpret_cast<hipFunction_t>(kernel)`). A
// library is no module: its globals are not found with hipModuleGetGlobal. Absent
// from ROCm 5.2 and 6.3.

/// hipLibraryLoadData(hipLibrary_t* library, const void* code, hipJitOption* jitOptions,
/// void** jitOptionsValues, unsigned int numJitOptions, hipLibraryOption* libraryOptions,
/// void** libraryOptionValues, unsigned int numLibraryOptions).
KIR_EXPORT hipError_t hipLibraryLoadData(void** library, const void* code, void* jit_options, void** jit_values,
                                         unsigned n_jit, void* library_options, void** library_values,
                                         unsigned n_library) {
  KIR_REAL(hipLibraryLoadData, hipError_t (*)(void**, const void*, void*, void**, unsigned, void*, void**, unsigned));
  return module_call(
      [&] {
        return real_hipLibraryLoadData(library, code, jit_options, jit_values, n_jit, library_options, library_values,
                                       n_library);
      },
      [&] {
        if (library) layer().module_loaded(*library, code, kir::hook::Vendor::hip, true);
      });
}

/// hipLibraryLoadFromFile(hipLibrary_t* library, const char* fileName, hipJitOption* jitOptions,
/// void** jitOptionsValues, unsigned int numJitOptions, hipLibraryOption* libraryOptions,
/// void** libraryOptionValues, unsigned int numLibraryOptions): the file read as hipModuleLoad's.
KIR_EXPORT hipError_t hipLibraryLoadFromFile(void** library, const char* fname, void* jit_options, void** jit_values,
                                             unsigned n_jit, void* library_options, void** library_values,
                                             unsigned n_library) {
  KIR_REAL(hipLibraryLoadFromFile,
           hipError_t (*)(void**, const char*, void*, void**, unsigned, void*, void**, unsigned));
  return module_call(
      [&] {
        return real_hipLibraryLoadFromFile(library, fname, jit_options, jit_values, n_jit, library_options,
                                           library_values, n_library);
      },
      [&] {
        if (!library || !fname) return;
        std::vector<char> bytes = file_bytes(fname);
        layer().module_loaded(*library, bytes.data(), kir::hook::Vendor::hip, true);
      });
}

/// hipLibraryUnload(hipLibrary_t library): the layer lets go of it first.
KIR_EXPORT hipError_t hipLibraryUnload(void* library) {
  KIR_REAL(hipLibraryUnload, hipError_t (*)(void*));
  if (!reporting()) return real_hipLibraryUnload(library);
  layer().fatbin_unregistered(library, nullptr);
  kir::hook::RuntimeCall inside;
  return real_hipLibraryUnload(library);
}

/// hipLibraryGetKernel(hipKernel_t* pKernel, hipLibrary_t library, const char* name).
KIR_EXPORT hipError_t hipLibraryGetKernel(void** kernel, void* library, const char* name) {
  KIR_REAL(hipLibraryGetKernel, hipError_t (*)(void**, void*, const char*));
  return module_call([&] { return real_hipLibraryGetKernel(kernel, library, name); },
                     [&] {
                       if (kernel) layer().function_found(library, *kernel, name);
                     });
}

/// hipKernelGetFunction(hipFunction_t* pFunc, hipKernel_t kernel) (ROCm/rocm-systems
/// projects/clr/hipamd/src/hip_library.cpp): launches by the function are launches of the kernel.
KIR_EXPORT hipError_t hipKernelGetFunction(void** function, void* kernel) {
  KIR_REAL(hipKernelGetFunction, hipError_t (*)(void**, void*));
  return module_call([&] { return real_hipKernelGetFunction(function, kernel); },
                     [&] {
                       if (function && *function && *function != kernel) layer().function_alias(*function, kernel);
                     });
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

// The other pinned host allocations, as CUDA's cudaHostAlloc / cudaMallocHost /
// cuMemAllocHost (cuda_runtime.cpp, driver_api.cpp): hipHostAlloc (5.2
// hip_runtime_api.h l. 3085, deprecated for hipHostMalloc; 6.3 l. 4100),
// hipMallocHost (5.2 l. 2539, deprecated; 6.3 l. 3432), hipMemAllocHost (6.3
// l. 3446; 5.2's library exports it, its header does not declare it) and
// hipExtHostAlloc (6.3 l. 3518, what 6.3's deprecation of hipHostMalloc points to;
// not in 5.2). Freed with hipHostFree or hipFreeHost (below).

/// hipHostAlloc(void** ptr, size_t size, unsigned int flags).
KIR_EXPORT hipError_t hipHostAlloc(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(hipHostAlloc, hipError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_hipHostAlloc(ptr, size, flags); });
}

/// hipExtHostAlloc(void** ptr, size_t size, unsigned int flags).
KIR_EXPORT hipError_t hipExtHostAlloc(void** ptr, size_t size, unsigned flags) {
  KIR_REAL(hipExtHostAlloc, hipError_t (*)(void**, size_t, unsigned));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_hipExtHostAlloc(ptr, size, flags); });
}

/// hipMallocHost(void** ptr, size_t size).
KIR_EXPORT hipError_t hipMallocHost(void** ptr, size_t size) {
  KIR_REAL(hipMallocHost, hipError_t (*)(void**, size_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_hipMallocHost(ptr, size); });
}

/// hipMemAllocHost(void** ptr, size_t size).
KIR_EXPORT hipError_t hipMemAllocHost(void** ptr, size_t size) {
  KIR_REAL(hipMemAllocHost, hipError_t (*)(void**, size_t));
  return tracked_alloc(ptr, size, KIR_ALLOC_HOST_PINNED, [&] { return real_hipMemAllocHost(ptr, size); });
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

/// hipFreeHost(void* ptr): 5.2 l. 3219 (deprecated for hipHostFree), 6.3 l. 4239 (what
/// 6.3's deprecation of hipHostFree points to).
KIR_EXPORT hipError_t hipFreeHost(void* ptr) {
  KIR_REAL(hipFreeHost, hipError_t (*)(void*));
  return tracked_free(kir::hook::address_of(ptr), [&] { return real_hipFreeHost(ptr); });
}

KIR_EXPORT hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  KIR_REAL(hipFreeAsync, hipError_t (*)(void*, hipStream_t));
  return kir::hook::device_free(kir::hook::address_of(ptr), stream, [&] { return real_hipFreeAsync(ptr, stream); });
}

/// hipGetProcAddress(const char* symbol, void** pfn, int hipVersion, uint64_t flags,
/// hipDriverProcAddressQueryResult* symbolStatus) (6.3 hip_runtime_api.h l. 4579; not in
/// 5.2): ROCm/clr's (hipamd/src/hip_device.cpp, hipGetProcAddress) looks `symbol` up in
/// libamdhip64 itself with dlsym, whatever `flags` say, so an app or library that gets
/// hipLaunchKernel & co. through it would bypass the layer, as cuGetProcAddress's
/// callers would the CUDA driver's interposers (driver_api.cpp): the layer hands out its
/// own entry point for each name it interposes, itself included.
KIR_EXPORT hipError_t hipGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags, void* status) {
  KIR_REAL(hipGetProcAddress, hipError_t (*)(const char*, void**, int, uint64_t, void*));
  hipError_t r = real_hipGetProcAddress(symbol, pfn, version, flags, status);
  if (r == hipSuccess && symbol && pfn && *pfn)
    if (void* ours = kir::hook::hip_interposer(symbol)) *pfn = ours;
  return r;
}

}  // extern "C"

/// The layer's HIP interposer exported as `name`, or nullptr: what hipGetProcAddress
/// and a dlsym of libamdhip64 by handle (dlsym.cpp) hand out instead of the runtime's.
void* kir::hook::hip_interposer(const char* name) {
  struct Entry {
    const char* name;
    void* fn;
  };
#define KIR_HIP_ENTRY(f) \
  Entry { #f, reinterpret_cast<void*>(&f) }
  static const Entry table[] = {
      KIR_HIP_ENTRY(__hipRegisterFatBinary),
      KIR_HIP_ENTRY(__hipUnregisterFatBinary),
      KIR_HIP_ENTRY(__hipRegisterFunction),
      KIR_HIP_ENTRY(__hipRegisterVar),
      KIR_HIP_ENTRY(hipLaunchKernel),
      KIR_HIP_ENTRY(hipLaunchKernel_spt),
      KIR_HIP_ENTRY(hipExtLaunchKernel),
      KIR_HIP_ENTRY(hipLaunchCooperativeKernel),
      KIR_HIP_ENTRY(hipLaunchCooperativeKernel_spt),
      KIR_HIP_ENTRY(hipModuleLoadData),
      KIR_HIP_ENTRY(hipModuleLoadDataEx),
      KIR_HIP_ENTRY(hipModuleLoad),
      KIR_HIP_ENTRY(hipModuleUnload),
      KIR_HIP_ENTRY(hipModuleGetFunction),
      KIR_HIP_ENTRY(hipModuleLaunchKernel),
      KIR_HIP_ENTRY(hipModuleLaunchCooperativeKernel),
      KIR_HIP_ENTRY(hipExtModuleLaunchKernel),
      KIR_HIP_ENTRY(hipLibraryLoadData),
      KIR_HIP_ENTRY(hipLibraryLoadFromFile),
      KIR_HIP_ENTRY(hipLibraryUnload),
      KIR_HIP_ENTRY(hipLibraryGetKernel),
      KIR_HIP_ENTRY(hipKernelGetFunction),
      KIR_HIP_ENTRY(hipMalloc),
      KIR_HIP_ENTRY(hipMallocManaged),
      KIR_HIP_ENTRY(hipHostMalloc),
      KIR_HIP_ENTRY(hipHostAlloc),
      KIR_HIP_ENTRY(hipExtHostAlloc),
      KIR_HIP_ENTRY(hipMallocHost),
      KIR_HIP_ENTRY(hipMemAllocHost),
      KIR_HIP_ENTRY(hipMallocAsync),
      KIR_HIP_ENTRY(hipMallocFromPoolAsync),
      KIR_HIP_ENTRY(hipExtMallocWithFlags),
      KIR_HIP_ENTRY(hipMallocPitch),
      KIR_HIP_ENTRY(hipMemMap),
      KIR_HIP_ENTRY(hipMemUnmap),
      KIR_HIP_ENTRY(hipFree),
      KIR_HIP_ENTRY(hipHostFree),
      KIR_HIP_ENTRY(hipFreeHost),
      KIR_HIP_ENTRY(hipFreeAsync),
      KIR_HIP_ENTRY(hipGetProcAddress),
  };
#undef KIR_HIP_ENTRY
  for (const Entry& e : table)
    if (std::strcmp(name, e.name) == 0) return e.fn;
  return nullptr;
}
