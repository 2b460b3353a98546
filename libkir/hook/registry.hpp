// The hook layer's registry: registered fatbins (and driver-loaded modules),
// their kernels and their globals; publishing a registration and retiring it
// at unload. One reader/writer lock; the C views handed to clients point into
// records that are never freed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kir/cuda/fatbin.hpp"
#include "kir/device_code.hpp"
#include "kir/hooks.h"

namespace kir::hook {

/// cudaGetSymbolAddress / hipGetSymbolAddress: (device address out, host symbol) -> error.
using SymbolResolver = int (*)(void** device, const void* host);
/// cuModuleGetGlobal / hipModuleGetGlobal: (device address out, size out, module, name) -> error.
using ModuleGlobalResolver = int (*)(uint64_t* device, size_t* bytes, const void* module, const char* name);

/// A registered device variable; the C view handed to clients points into it.
struct GlobalRecord {
  std::string name;
  kir_hook_global view{};
  SymbolResolver resolve = nullptr;
  /// A global of a driver-loaded module (no host shadow): found by name in the
  /// module `view.fatbin`; `view.host_address` is then a token the layer owns.
  ModuleGlobalResolver module_resolve = nullptr;
  std::atomic<uint64_t> device_address{0};
};

struct KernelRecord;
struct VendorTraits;  // vendor.hpp

/// A registered fatbin or loaded module, parsed. `container` views the app's
/// own memory (a registered fatbin) or `owned` (a driver-loaded one, copied at
/// load: the app may free its buffer); it is dropped when the fatbin is
/// unregistered, so nothing reads an unloaded library's image.
struct FatbinRecord {
  const VendorTraits* traits = nullptr;  // the runtime that registered or loaded it
  const void* wrapper = nullptr;         // the registration's wrapper (nullptr: a driver-loaded module)
  std::optional<FatbinContainer> container;
  std::vector<uint8_t> owned;
  std::optional<DeviceCode> code;  // of the image launches will use (decoded on first need)
  std::string arch;                // that image's target
  bool decoded = false;
  const FatbinEntry* chosen = nullptr;  // the container entry `code` came from
  std::vector<KernelRecord*> kernels;   // registered with it (under the registry lock)
  std::vector<GlobalRecord*> globals;
  // The code's bytes for clients that ask (kir_hook_kernel_code): decoded on
  // first request and kept; a driver-loaded bare image is copied at load.
  // `unloaded` is set under this mutex as the container is dropped.
  std::mutex code_mutex;
  std::vector<uint8_t> launched_bytes, ptx_bytes;
  std::string ptx_arch;
  bool launched_ready = false, ptx_ready = false, launched_tried = false, ptx_tried = false, unloaded = false;
  // A device-linked registration (nvcc -rdc=true: __cudaRegisterLinkedBinary
  // registers the linked fatbin with a version-2 wrapper listing the units'
  // relocatable fatbins, `__nv_relfatbin`): each unit's container, in link
  // order (views of the app's memory, dropped at unload; nullopt for a unit
  // that could not be read), and its PTX for clients (kir_hook_kernel_code_unit),
  // decoded on first request. All freed at unload.
  struct Unit {
    std::optional<FatbinContainer> container;
    std::vector<uint8_t> ptx;
    std::string arch;
    bool tried = false, ready = false;
  };
  std::vector<Unit> units;
};

/// A registered kernel; the C view handed to clients points into it. Never
/// freed: an unloaded kernel's view stays valid, marked `unloaded`.
struct KernelRecord {
  std::string name;
  FatbinRecord* fatbin = nullptr;
  std::vector<uint32_t> offsets, sizes;
  std::vector<kir_jit_arg> jit_args;  // set once (Proteus ABI); the view points into it
  kir_hook_kernel view{};
  std::vector<const void*> aliases;  // other handles launches name it by (cuKernelGetFunction)
  /// The launch identity's first records (HEADER, STATIC, ARCH) for `arch`, encoded
  /// on the first launch that needs them and kept (replaced, never freed, if the
  /// arch changes: a launch on another thread may be reading the old one).
  struct IdentityPrefix {
    std::string arch, bytes;
  };
  std::atomic<const IdentityPrefix*> identity_prefix{nullptr};
};

/// Parse a fatbin record's container: choose the image launches use and decode
/// it (vendor_cuda.cpp). Failures are reported against `handle`.
void decode_fatbin(FatbinRecord& f, const void* handle);

class Registry {
 public:
  /// Whether `handle`'s live registration views the image at `data` already.
  bool holds_image(const void* handle, const uint8_t* data) const;
  /// Whether `handle`'s live registration was made with `wrapper`.
  bool holds_wrapper(const void* handle, const void* wrapper) const;
  /// The traits of `handle`'s live registration, or nullptr.
  const VendorTraits* traits_of(const void* handle) const;
  /// Put `record` under `handle`, retiring a live registration there first.
  void publish(const void* handle, std::unique_ptr<FatbinRecord> record);
  /// How many kernels the live registration under `handle` has; nullopt when none.
  std::optional<size_t> kernels_of(const void* handle) const;
  /// Retire the registration under `handle`: mark its kernels and globals
  /// unloaded, drop its image views. False when there is none.
  bool retire(const void* handle);
  /// The live registration under `handle`, decoded (kernels registered with it need its layouts).
  FatbinRecord* decoded_fatbin(const void* handle);
  FatbinRecord* fatbin(const void* handle) const;

  /// Register kernel `name` launched by `stub` with `fatbin` (under `handle`):
  /// its view, or nullptr when `stub` was registered before.
  const kir_hook_kernel* add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin);
  bool has_kernel(const void* stub) const;
  void alias(const void* alias, const void* of);
  void kernel_handle_found(const void* handle, const void* stub);
  const void* stub_of_handle(const void* handle) const;  // `handle` itself when unknown
  /// The live kernel launched by `stub` (this thread's recent answers first: no lock).
  KernelRecord* kernel_for(const void* stub);
  /// The live registration of `kernel` (not a stale view of an earlier load), or nullptr.
  FatbinRecord* live_fatbin_of(const kir_hook_kernel* kernel);
  /// The kernel's view once they are set (nullptr: no such kernel, none given, or set before).
  const kir_hook_kernel* set_jit_args(const void* stub, std::vector<kir_jit_arg> args);
  size_t kernel_count() const;
  const kir_hook_kernel* kernel_at(size_t index) const;

  /// Register device variable `name` at `host` with the registration under `handle`:
  /// its view; `added` false when that registration lists it already (registered
  /// twice: __cudaRegisterVar and the Proteus pass's __proteus_register_var), then
  /// the view is the first registration's.
  const kir_hook_global* add_global(const void* handle, const void* host, const char* name, size_t size,
                                    SymbolResolver resolve, bool& added);
  /// Register global `name` of the driver-loaded module under `handle`, found by
  /// `resolve` (cuModuleGetGlobal) when asked; its view's host_address is a token
  /// (the record's own address) that kir_hook_global_device_address answers for.
  const kir_hook_global* add_module_global(const void* handle, const char* name, size_t size,
                                           ModuleGlobalResolver resolve);
  /// The globals of the live registration under `handle`, in registration order:
  /// their count, the first `capacity` of them in `out` (kir_hook_fatbin_globals).
  size_t fatbin_globals(const void* handle, const kir_hook_global** out, size_t capacity) const;
  size_t global_count() const;
  const kir_hook_global* global_at(size_t index) const;
  uint64_t global_device_address(const void* host);

  /// kir_hook_stats' registry counts: live fatbins, kernels, globals; unregistered.
  void counts(kir_hook_stats& s) const;

 private:
  bool retire_locked(const void* handle);

  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<FatbinRecord>> fatbins_;  // live ones
  std::unordered_map<const void*, KernelRecord*> kernels_;                  // live ones, by host stub / CUfunction
  std::atomic<uint64_t> generation_{1};  ///< bumped at each change of kernels_ (kernel_for's per-thread answers)
  std::vector<std::unique_ptr<KernelRecord>> kernel_order_;  // all, never freed (kir_hook_kernel_at)
  std::vector<std::unique_ptr<FatbinRecord>> retired_;       // unregistered, kept for their kernels' views
  std::atomic<uint64_t> unregistered_{0};
  std::unordered_map<const void*, const void*> stub_by_handle_;  // cudaKernel_t -> host stub
  std::vector<std::unique_ptr<GlobalRecord>> globals_order_;
  std::unordered_map<const void*, GlobalRecord*> globals_by_host_;
};

}  // namespace kir::hook
