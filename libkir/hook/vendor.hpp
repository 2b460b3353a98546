// What differs between the GPU runtimes the layer interposes (CUDA, HIP), in
// one traits type: how a registration's wrapper and a driver-loaded module are
// read, which substitute code kinds and handles a launch takes, and how
// substitute code is loaded. The layer and the override code ask traits(vendor)
// and never branch on the vendor themselves: a runtime is added by a
// VendorTraits of its own (vendor_cuda.cpp, vendor_hip.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kir/hooks.h"
#include "kir/model.hpp"
#include "registry.hpp"

namespace kir::hook {

/// Which runtime a call came through.
enum class Vendor {
  cuda_runtime,  // the CUDA runtime API (and the Proteus launch ABI): may make the primary context current
  cuda_driver,   // the driver API: the app's current context
  hip,
};

struct Dim3;  // interpose.hpp

struct VendorTraits {
  const char* runtime;  ///< "CUDA", "HIP" (failure lines)
  /// The libraries its driver entry points are found in (NULL-terminated).
  const char* const* libraries;
  /// A registration (__cudaRegisterFatBinary's `__fatBinC_Wrapper_t`,
  /// __hipRegisterFatBinary's HIPF wrapper) read into a record and its image
  /// count; nullptr when `registry` has that very image under `handle` already.
  std::unique_ptr<FatbinRecord> (*read_registration)(const void* handle, const void* wrapper, const Registry& registry,
                                                     size_t& images);
  /// A module loaded through the driver (cuModuleLoadData...), sized from its
  /// own headers; nullptr where the layer does not interpose module loads.
  std::unique_ptr<FatbinRecord> (*read_module)(const void* module, const void* image, size_t& images);
  /// Whether substitute code of `kind` loads; `loadable` names those that do.
  bool (*loads)(ImageKind kind);
  const char* loadable;
  /// Whether a substitute handle of kir_hook_substitute.kind `kind` is this runtime's.
  bool (*own_handle)(int kind);
  /// Where substitute code is loaded once (the current CUDA context, the
  /// current HIP device), or nullptr and `why`.
  const void* (*load_site)(Vendor vendor, std::string& why);
  /// Load `image` (`what`: "ptx sm_90") and find its function `entry`: true,
  /// `module` and `function`, or false and `why` (nothing left loaded).
  bool (*load)(const void* image, const char* entry, const std::string& what, void*& module, void*& function,
               std::string& why);
  /// Unload a module `load` loaded (a substitute its client refused in on_loaded).
  void (*unload)(void* module);
  /// Let `function` be launched with `bytes` of dynamic shared memory (over
  /// `shared_without_opt_in`): true, or false and `why`.
  bool (*allow_shared)(void* function, int bytes, std::string& why);
  /// The device at `site` (load_site's answer): its ordinal (-1 unknown), its
  /// arch ("sm_90"; HIP: `code_arch`, the target of the kernel's code object, when
  /// given; "" unknown; valid for the process's life) and the context reported
  /// (CUDA: the site; HIP: nullptr).
  void (*device)(const void* site, const std::string* code_arch, int& ordinal, const char*& arch, const void*& context);
  /// The magic a registration's wrapper starts with: CUDA's `__fatBinC_Wrapper_t`
  /// 0x466243b1, HIP's "HIPF" 0x48495046 (traits_of_wrapper).
  uint32_t wrapper_magic;
  /// The Vendor of this runtime's registrations and runtime-API launches.
  Vendor runtime_vendor;
  /// The runtime API entry points a call of the Proteus ABI forwards to without
  /// the Proteus runtime (proteus_abi.cpp): its launch (cudaLaunchKernel's
  /// signature), stream synchronization, host function and symbol address.
  const char* launch_entry;
  const char* synchronize_entry;
  const char* host_function_entry;
  const char* symbol_address_entry;
  /// Launch a loaded substitute function with a runtime launch's configuration
  /// (cuLaunchKernel, hipModuleLaunchKernel).
  int (*launch_function)(void* f, const Dim3& grid, const Dim3& block, unsigned shared, void* stream, void** args);
  /// A driver-loaded module's global by name (cuModuleGetGlobal, hipModuleGetGlobal):
  /// the module globals a record snapshots and a replay restores by name.
  int (*module_global)(uint64_t* device, size_t* bytes, const void* module, const char* name);
  /// The dynamic shared memory a loaded function may use without opting in: a CODE
  /// substitute launched with more gets allow_shared first (CUDA: 48 KiB; AMD: 64 KiB).
  size_t shared_without_opt_in;
  /// A registration's launched image bytes (kir_hook_kernel_code's KIR_CODE_LAUNCHED),
  /// read again from its live wrapper on a client's first request, for runtimes whose
  /// registration keeps no container to decode them from (HIP: the offload bundle,
  /// plain or CCOB); nullptr where the container serves them (CUDA).
  bool (*registered_code)(const FatbinRecord& record, std::vector<uint8_t>& out, std::string& why);
  /// kir_hook_launch.vendor of its launches (hooks.h API 11): KIR_HOOK_VENDOR_CUDA, _HIP.
  int hook_vendor;
};

/// `text` kept for the process's life (one copy per distinct text): arch names
/// handed to clients.
const char* interned(const std::string& text);

const VendorTraits& traits(Vendor vendor);

/// The traits whose hook_vendor is `vendor` (KIR_HOOK_VENDOR_*), or nullptr.
const VendorTraits* traits_of_hook_vendor(int vendor);

/// The traits whose wrapper_magic `wrapper` starts with, or nullptr (none, or
/// fewer than 4 bytes mapped there): how a registration's wrapper handed to the
/// Proteus ABI is read, whichever runtime registered it.
const VendorTraits* traits_of_wrapper(const void* wrapper);

/// The bytes from `p` to the end of the loaded ELF segment holding it — where a
/// registered fatbin or bundle lies, in the app's own image — so that damaged
/// headers meet the segment's end, not unmapped memory; kUnknownSize when no
/// loaded object holds `p` (a buffer the app allocated).
uint64_t mapped_extent(const void* p);

}  // namespace kir::hook
