// The Proteus JIT's registration and launch ABI: calls the Proteus pass inserts
// into apps (Proteus src/pass/ProteusPass.cpp, getJitRegisterFatBinaryFn and
// its neighbours), served by its runtime (src/runtime/CompilerInterfaceDevice.cpp).
// __proteus_register_fatbinary repeats the runtime's registration (same handle,
// same wrapper, CUDA's or HIP's): the layer keeps the first (Layer::fatbin_noticed).
// Captured, then forwarded to the real Proteus runtime when it is loaded; without it,
// launches go to the runtime that registered the kernel (the ABI is cudaLaunchKernel's
// and hipLaunchKernel's) and registrations are only recorded.
//
// Runtime-constant arguments (API 4: kir_hook_kernel.jit_args): the pass's
// registration code creates one RuntimeConstantInfo per annotated argument with
// __proteus_create_runtime_constant_info_{scalar,array_const_size,
// array_runconst_size,object} (Proteus src/pass/ProteusPass.cpp,
// getProteusCreateRuntimeConstantInfo*Fn; served by
// src/runtime/CompilerInterfaceRuntimeConstantInfo.cpp) and hands the array of
// their pointers to __proteus_register_function. The layer remembers what each
// object describes, keyed by its address: Proteus's object when its runtime is
// loaded (forwarded, its pointer returned), else one of the layer's own.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "interpose.hpp"
#include "lambda_captures.hpp"

namespace {

using kir::hook::Dim3;
using LaunchFn = int (*)(const void*, Dim3, Dim3, void**, size_t, void*);

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

kir::hook::Layer& layer() { return kir::hook::Layer::get(); }

/// Proteus's RuntimeConstantType (include/proteus/CompilerInterfaceTypes.h).
enum ProteusType : int32_t {
  kBool = 1,
  kInt8,
  kInt32,
  kInt64,
  kFloat,
  kDouble,
  kLongDouble,
  kPtr,
  kStaticArray,
  kVector,
  kArray,
  kObject
};

/// The kir_arg_type of a Proteus scalar (or array element) type; 0 for another.
uint8_t arg_type(int32_t t) {
  switch (t) {
    case kBool: return KIR_ARG_BOOL;
    case kInt8: return KIR_ARG_I8;
    case kInt32: return KIR_ARG_I32;
    case kInt64: return KIR_ARG_I64;
    case kFloat: return KIR_ARG_F32;
    case kDouble: return KIR_ARG_F64;
    case kLongDouble: return KIR_ARG_BYTES;  // no kir type: its bytes
    case kPtr: return KIR_ARG_PTR;
    default: return 0;
  }
}

/// What each RuntimeConstantInfo object describes, by its address; the layer's
/// own objects (without Proteus) are kept for the process's life, as Proteus keeps its.
struct RuntimeConstants {
  std::mutex mutex;
  std::unordered_map<const void*, kir_jit_arg> described;
  std::deque<kir_jit_arg> own;
};

RuntimeConstants& runtime_constants() {
  static RuntimeConstants* r = new RuntimeConstants();
  return *r;
}

/// Remember `arg` for `object` (Proteus's, or nullptr: a new one of the layer's),
/// and return the object. Positions come 0-based (the pass's `Pos`: annotation
/// position - 1, AnnotationHandler.cpp) and are kept 1-based; a description kir
/// cannot express is reported and not kept.
void* describe(void* object, kir_jit_arg arg, int32_t pos, const char* call, bool valid) {
  RuntimeConstants& r = runtime_constants();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!object) object = &r.own.emplace_back();
  if (pos < 0 || !valid) {
    kir::hook::report_failure(kir::hook::Failure::jit_args,
                              std::string(call) + "(position " + std::to_string(pos) + ")",
                              "a runtime constant kir cannot describe (negative position, or an unknown "
                              "RuntimeConstantType): not among the kernel's jit_args");
    return object;
  }
  arg.position = uint32_t(pos) + 1;
  r.described[object] = arg;
  return object;
}

template <class F>
F proteus(const char* name) {
  return next<F>(name);
}

/// A runtime's entry points for the Proteus launch, looked up once per runtime.
struct RuntimeEntries {
  const kir::hook::VendorTraits* traits = nullptr;
  LaunchFn launch = nullptr;
  kir::hook::StreamOps ops{};
};

RuntimeEntries lookup(const kir::hook::VendorTraits& t) {
  RuntimeEntries e;
  e.traits = &t;
  e.launch = reinterpret_cast<LaunchFn>(dlsym(RTLD_DEFAULT, t.launch_entry));
  e.ops = {reinterpret_cast<int (*)(void*)>(dlsym(RTLD_DEFAULT, t.synchronize_entry)),
           reinterpret_cast<int (*)(void*, void (*)(void*), void*)>(dlsym(RTLD_DEFAULT, t.host_function_entry))};
  return e;
}

const RuntimeEntries& runtime_entries(const kir::hook::VendorTraits& t) {
  static RuntimeEntries cuda = lookup(kir::hook::traits(kir::hook::Vendor::cuda_runtime));
  static RuntimeEntries hip = lookup(kir::hook::traits(kir::hook::Vendor::hip));
  for (const RuntimeEntries* e : {&cuda, &hip})
    if (e->traits == &t) return *e;
  return cuda;
}

struct RuntimeConstantHead {
  alignas(16) unsigned char value[16];
  int32_t type, pos, offset;
};
static_assert(offsetof(RuntimeConstantHead, type) == 16 && offsetof(RuntimeConstantHead, offset) == 24);

/// The bytes of a value of Proteus scalar type `t` (0: none kir keeps).
size_t value_size(int32_t t) {
  switch (t) {
    case kBool:
    case kInt8: return 1;
    case kInt32:
    case kFloat: return 4;
    case kInt64:
    case kDouble:
    case kPtr: return 8;
#if defined(__x86_64__) || defined(__i386__)
    case kLongDouble: return 10;  // x87 extended: the rest of its 16 bytes is padding
#else
    case kLongDouble: return sizeof(long double);
#endif
    default: return 0;
  }
}

}  // namespace

extern "C" {

// The wrapper is the one the runtime registered (CUDA's __fatBinC_Wrapper_t, HIP's
// HIPF wrapper: the pass passes __cudaRegisterFatBinary's / __hipRegisterFatBinary's
// own argument, ProteusPass.cpp instrumentRegisterFatBinary): read by its magic.
KIR_EXPORT void __proteus_register_fatbinary(void* handle, void* wrapper, const char* module_id) {
  static const auto real = next<void (*)(void*, void*, const char*)>("__proteus_register_fatbinary");
  layer().fatbin_noticed(handle, wrapper, "__proteus_register_fatbinary");
  if (real) real(handle, wrapper, module_id);
}

KIR_EXPORT void __proteus_register_fatbinary_end(void* handle) {
  static const auto real = next<void (*)(void*)>("__proteus_register_fatbinary_end");
  if (real) real(handle);
}

KIR_EXPORT void __proteus_register_linked_binary(void* wrapper, const char* module_id) {
  static const auto real = next<void (*)(void*, const char*)>("__proteus_register_linked_binary");
  layer().fatbin_noticed(wrapper, wrapper, "__proteus_register_linked_binary");
  if (real) real(wrapper, module_id);
}

KIR_EXPORT void __proteus_register_var(void* handle, const void* host, const char* name, size_t size) {
  static const auto real = next<void (*)(void*, const void*, const char*, size_t)>("__proteus_register_var");
  // The registering runtime's cudaGetSymbolAddress / hipGetSymbolAddress (a variable the
  // runtime registered already keeps its first registration's).
  const char* symbol = layer().traits_of_handle(handle).symbol_address_entry;
  const auto resolve = reinterpret_cast<kir::hook::SymbolResolver>(dlsym(RTLD_DEFAULT, symbol));
  layer().global_registered(handle, host, name, size, resolve);
  if (real) real(handle, host, name, size);
}

KIR_EXPORT void* __proteus_create_runtime_constant_info_scalar(int32_t type, int32_t pos) {
  static const auto real = proteus<void* (*)(int32_t, int32_t)>("__proteus_create_runtime_constant_info_scalar");
  kir_jit_arg a{};
  a.kind = KIR_JIT_SCALAR;
  a.type = arg_type(type);
  return describe(real ? real(type, pos) : nullptr, a, pos, "__proteus_create_runtime_constant_info_scalar",
                  a.type != 0);
}

KIR_EXPORT void* __proteus_create_runtime_constant_info_array_const_size(int32_t type, int32_t pos, int32_t count,
                                                                         int32_t element_type) {
  static const auto real =
      proteus<void* (*)(int32_t, int32_t, int32_t, int32_t)>("__proteus_create_runtime_constant_info_array_const_size");
  kir_jit_arg a{};
  a.kind = type == kVector ? KIR_JIT_VECTOR : KIR_JIT_ARRAY;  // VECTOR: `<N x T>`, STATIC_ARRAY: `[N x T]`
  a.type = arg_type(element_type);
  a.by_value = type == kStaticArray || type == kVector;  // the elements are the argument's own bytes
  a.count = uint32_t(count);
  bool valid = a.type != 0 && count >= 0 && (type == kArray || type == kStaticArray || type == kVector);
  return describe(real ? real(type, pos, count, element_type) : nullptr, a, pos,
                  "__proteus_create_runtime_constant_info_array_const_size", valid);
}

KIR_EXPORT void* __proteus_create_runtime_constant_info_array_runconst_size(int32_t type, int32_t pos,
                                                                            int32_t element_type, int32_t count_type,
                                                                            int32_t count_pos) {
  static const auto real = proteus<void* (*)(int32_t, int32_t, int32_t, int32_t, int32_t)>(
      "__proteus_create_runtime_constant_info_array_runconst_size");
  kir_jit_arg a{};
  a.kind = KIR_JIT_ARRAY;
  a.type = arg_type(element_type);
  a.count_type = arg_type(count_type);
  a.count_position = count_pos >= 0 ? uint32_t(count_pos) + 1 : 0;  // 0-based NumEltsPos, as Pos
  bool valid = a.type != 0 && a.count_type != 0 && count_pos >= 0 && type == kArray;
  return describe(real ? real(type, pos, element_type, count_type, count_pos) : nullptr, a, pos,
                  "__proteus_create_runtime_constant_info_array_runconst_size", valid);
}

KIR_EXPORT void* __proteus_create_runtime_constant_info_object(int32_t type, int32_t pos, int32_t size, bool by_value) {
  static const auto real =
      proteus<void* (*)(int32_t, int32_t, int32_t, bool)>("__proteus_create_runtime_constant_info_object");
  kir_jit_arg a{};
  a.kind = KIR_JIT_OBJECT;
  a.type = KIR_ARG_BYTES;
  a.by_value = by_value ? 1 : 0;
  a.count = uint32_t(size);
  return describe(real ? real(type, pos, size, by_value) : nullptr, a, pos,
                  "__proteus_create_runtime_constant_info_object", type == kObject && size >= 0);
}

// Lambda captures (API 7, kir_hook_kernel_captures): Proteus's host API
// (include/proteus/JitInterface.h) registers a lambda's `jit_variable` captures with
// __proteus_register_variable(RuntimeConstant RC, const char* AssociatedLambda) and
// publishes them with __proteus_register_lambda(const char* Symbol), both served by
// src/runtime/CompilerInterfaceHost.cpp (LambdaRegistry::setJitVariable, registerLambda).
// RuntimeConstant (include/proteus/CompilerInterfaceTypes.h) holds std::shared_ptr
// members, so it is not trivial for the purpose of calls: the Itanium C++ ABI passes it
// by invisible reference (a pointer to the caller's copy, which the caller destroys).
// The layer reads what a capture is of it: the 16-byte RuntimeConstantValue union
// (jit_variable memcpy's the value to its start), then Type, Pos and Offset.
KIR_EXPORT void __proteus_register_variable(const RuntimeConstantHead* rc, const char* lambda) {
  static const auto real = next<void (*)(const RuntimeConstantHead*, const char*)>("__proteus_register_variable");
  size_t size = rc ? value_size(rc->type) : 0;
  if (rc && lambda && size && rc->pos >= 0 && rc->offset >= 0)
    kir::hook::LambdaCaptures::get().variable(lambda, arg_type(rc->type), uint32_t(rc->pos), uint32_t(rc->offset),
                                              rc->value, size);
  else
    kir::hook::report_failure(
        kir::hook::Failure::jit_args, std::string("__proteus_register_variable(\"") + (lambda ? lambda : "") + "\")",
        rc ? "a capture kir cannot describe (RuntimeConstantType " + std::to_string(rc->type) + ", Pos " +
                 std::to_string(rc->pos) + ", Offset " + std::to_string(rc->offset) + "): not among its captures"
           : std::string("a NULL RuntimeConstant"));
  if (real) real(rc, lambda);
}

KIR_EXPORT void __proteus_register_lambda(const char* lambda) {
  static const auto real = next<void (*)(const char*)>("__proteus_register_lambda");
  if (lambda) kir::hook::LambdaCaptures::get().lambda(lambda);
  if (real) real(lambda);
}

// Proteus: __proteus_register_function(void* Handle, void* Kernel, char const* KernelName,
// RuntimeConstantInfo** RCInfoArrayPtr, int32_t NumRCs) (ProteusPass.cpp, getJitRegisterFunctionFn).
KIR_EXPORT void __proteus_register_function(void* handle, const void* stub, const char* name, void** infos,
                                            int32_t count) {
  static const auto real =
      next<void (*)(void*, const void*, const char*, void**, int32_t)>("__proteus_register_function");
  if (!layer().kernel_view(stub)) layer().kernel_registered(handle, stub, name);
  if (infos && count > 0) {
    std::vector<kir_jit_arg> args;
    RuntimeConstants& r = runtime_constants();
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      for (int32_t i = 0; i < count; ++i) {
        auto it = r.described.find(infos[i]);
        if (it != r.described.end()) args.push_back(it->second);
      }
    }
    if (args.size() != size_t(count))
      kir::hook::report_failure(kir::hook::Failure::jit_args,
                                "__proteus_register_function(\"" + std::string(name ? name : "") + "\")",
                                std::to_string(size_t(count) - args.size()) + " of its " + std::to_string(count) +
                                    " runtime constants were not described through "
                                    "__proteus_create_runtime_constant_info_* (or not in a form kir keeps)");
    layer().set_jit_args(stub, std::move(args));
  }
  if (real) real(handle, stub, name, infos, count);
}

// Proteus: __proteus_launch_kernel(void* Kernel, dim3 GridDim, dim3 BlockDim, void** KernelArgs,
// uint64_t ShmemSize, void* Stream), for CUDA and HIP alike (CompilerInterfaceDevice.cpp). The
// runtime is the one that registered the kernel (VendorTraits): without Proteus the launch goes to
// its cudaLaunchKernel / hipLaunchKernel (ours, which forwards without a second report), a
// substitute through cuLaunchKernel / hipModuleLaunchKernel.
KIR_EXPORT int __proteus_launch_kernel(const void* kernel, Dim3 grid, Dim3 block, void** args, size_t shared_bytes,
                                       void* stream) {
  static const auto real = next<LaunchFn>("__proteus_launch_kernel");
  const RuntimeEntries& runtime = runtime_entries(layer().traits_of_kernel(kernel));
  kir_hook_launch launch =
      kir::hook::launch_event("__proteus_launch_kernel", kernel, grid, block, shared_bytes, stream, args);
  return kir::hook::claimable_launch(
      launch, runtime.ops.synchronize && runtime.ops.enqueue_host ? &runtime.ops : nullptr,
      runtime.traits->runtime_vendor,
      [&] {
        LaunchFn forward = real ? real : runtime.launch;
        return forward ? forward(kernel, grid, block, args, shared_bytes, stream) : 1;
      },
      [&](void* f) { return runtime.traits->launch_function(f, grid, block, unsigned(shared_bytes), stream, args); });
}

}  // extern "C"
