// The Proteus JIT's registration and launch ABI: calls the Proteus pass inserts
// into apps (Proteus src/pass/ProteusPass.cpp, getJitRegisterFatBinaryFn and
// its neighbours), served by its runtime (src/runtime/CompilerInterfaceDevice.cpp).
// __proteus_register_fatbinary repeats the runtime's registration (same handle,
// same wrapper): the layer keeps the first. Captured, then forwarded to the real Proteus
// runtime when it is loaded; without it, launches go to the CUDA runtime (the
// ABI is cudaLaunchKernel's) and registrations are only recorded.
#include <cstddef>
#include <cstdint>

#include "interpose.hpp"

namespace {

using kir::hook::Dim3;
using LaunchFn = int (*)(const void*, Dim3, Dim3, void**, size_t, void*);

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }

}  // namespace

extern "C" {

KIR_EXPORT void __proteus_register_fatbinary(void* handle, void* wrapper, const char* module_id) {
  static const auto real = next<void (*)(void*, void*, const char*)>("__proteus_register_fatbinary");
  layer().fatbin_registered(handle, wrapper);
  if (real) real(handle, wrapper, module_id);
}

KIR_EXPORT void __proteus_register_fatbinary_end(void* handle) {
  static const auto real = next<void (*)(void*)>("__proteus_register_fatbinary_end");
  if (real) real(handle);
}

KIR_EXPORT void __proteus_register_linked_binary(void* wrapper, const char* module_id) {
  static const auto real = next<void (*)(void*, const char*)>("__proteus_register_linked_binary");
  layer().fatbin_registered(wrapper, wrapper);
  if (real) real(wrapper, module_id);
}

KIR_EXPORT void __proteus_register_var(void* handle, const void* host, const char* name, size_t size) {
  static const auto real = next<void (*)(void*, const void*, const char*, size_t)>("__proteus_register_var");
  static const auto resolve =
      reinterpret_cast<kir::hook::SymbolResolver>(dlsym(RTLD_DEFAULT, "cudaGetSymbolAddress"));
  layer().global_registered(handle, host, name, size, resolve);
  if (real) real(handle, host, name, size);
}

KIR_EXPORT void __proteus_register_function(void* handle, const void* stub, const char* name,
                                            int32_t* rc_info, int32_t count) {
  static const auto real =
      next<void (*)(void*, const void*, const char*, int32_t*, int32_t)>("__proteus_register_function");
  if (!layer().kernel_view(stub)) layer().kernel_registered(handle, stub, name);
  if (real) real(handle, stub, name, rc_info, count);
}

KIR_EXPORT int __proteus_launch_kernel(const void* kernel, Dim3 grid, Dim3 block, void** args,
                                       size_t shared_bytes, void* stream) {
  static const auto real = next<LaunchFn>("__proteus_launch_kernel");
  // Without Proteus: cudaLaunchKernel (ours, which forwards without a second report).
  static const auto runtime = real ? nullptr : reinterpret_cast<LaunchFn>(dlsym(RTLD_DEFAULT, "cudaLaunchKernel"));
  static const kir::hook::StreamOps ops{
      reinterpret_cast<int (*)(void*)>(dlsym(RTLD_DEFAULT, "cudaStreamSynchronize")),
      reinterpret_cast<int (*)(void*, void (*)(void*), void*)>(dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc"))};
  kir_hook_launch launch = kir::hook::launch_event("__proteus_launch_kernel", kernel, grid, block, shared_bytes,
                                                   stream, args);
  return kir::hook::traced_launch(launch, ops.synchronize && ops.enqueue_host ? &ops : nullptr, [&] {
    LaunchFn forward = real ? real : runtime;
    return forward ? forward(kernel, grid, block, args, shared_bytes, stream) : 1;
  });
}

}  // extern "C"
