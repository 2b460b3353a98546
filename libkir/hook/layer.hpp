// The hook layer: what the interposers (cuda_runtime.cpp, driver_api.cpp,
// hip_runtime.cpp, proteus_abi.cpp) tell it, turned into the registry's,
// the allocation tracker's and the client table's work and the clients'
// callbacks. Private to libkir_hook.so; the C API is exports.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "allocation_tracker.hpp"
#include "client_table.hpp"
#include "failure_log.hpp"
#include "kir/hooks.h"
#include "kir_hook_internal/thread_counters.hpp"
#include "registry.hpp"
#include "runtime_call.hpp"
#include "vendor.hpp"

namespace kir::hook {

/// A launch a client claimed (API 4): who, what it asked for, and the function
/// to launch for a substitute (resolved by the layer; nullptr for HANDLED).
struct Claim {
  int client = -1;
  kir_hook_substitute sub;  // filled when a client claims (left uninitialized: every launch makes one)
  void* function = nullptr;
};

/// The function a claim launches: the client's handle, or its code's entry,
/// loaded once per context (override.cpp). nullptr after a reported failure.
void* substitute_function(const kir_hook_launch& launch, const Claim& claim, Vendor vendor);

class Layer {
 public:
  static Layer& get();

  Registry& registry() { return registry_; }
  AllocationTracker& allocations() { return allocations_; }

  /// __cudaRegisterFatBinary (and the Proteus ABI's), __hipRegisterFatBinary:
  /// `wrapper` read by `vendor`'s traits.
  void fatbin_registered(const void* handle, const void* wrapper, Vendor vendor);
  /// A second notice of a registration (the Proteus ABI's __proteus_register_fatbinary,
  /// __proteus_register_linked_binary; `api` names it): `wrapper` read by the traits
  /// its magic names, whichever runtime registered it. Nothing when `handle`'s live
  /// registration was made with `wrapper` (or views its image); a notice that
  /// cannot be read is a failure and leaves a live registration as it is.
  void fatbin_noticed(const void* handle, const void* wrapper, const char* api);
  /// The traits of the runtime that registered `handle` (else of the latest
  /// registration; CUDA's before any).
  const VendorTraits& traits_of_handle(const void* handle) const;
  /// The traits of the runtime that registered the kernel launched by `stub`
  /// (else as traits_of_handle).
  const VendorTraits& traits_of_kernel(const void* stub);
  /// A module loaded through the driver API (cuModuleLoadData...): `image` is a
  /// cubin, PTX text or a fatbin container, sized from its own headers. The
  /// globals of the image it decoded are registered with the module, found by
  /// name (VendorTraits::module_global) when a client asks where they are; not
  /// for a `library` (cuLibraryLoadData: its handle is no module).
  void module_loaded(const void* module, const void* image, Vendor vendor, bool library = false);
  /// __cudaUnregisterFatBinary / __hipUnregisterFatBinary / cuModuleUnload /
  /// cuLibraryUnload: tells clients (fatbin_unregistered), then retires the
  /// registration: its kernels and globals stay as views marked `unloaded`,
  /// nothing keeps a view of its image. Call before the real unregister.
  /// `api` names the call for a failure line when `handle` is unknown (nullptr:
  /// an unknown handle is not a failure, as for modules loaded in ways the
  /// layer does not see).
  void fatbin_unregistered(const void* handle, const char* api);
  void kernel_registered(const void* handle, const void* stub, const char* name);
  /// A function looked up in a loaded module (cuModuleGetFunction, cuLibraryGetKernel).
  void function_found(const void* module, const void* function, const char* name);
  /// Launches by `alias` are launches of the kernel registered as `of` (a CUkernel's
  /// CUfunction); nothing when `of` is not a live kernel.
  void function_alias(const void* alias, const void* of) { registry_.alias(alias, of); }
  /// A runtime kernel handle (cudaKernel_t) for a host stub, and back.
  void kernel_handle_found(const void* handle, const void* stub) { registry_.kernel_handle_found(handle, stub); }
  const void* stub_of_handle(const void* handle) const;  // `handle` itself when unknown
  /// The registered kernel behind a host stub or CUfunction, or nullptr.
  const kir_hook_kernel* kernel_view(const void* stub);
  /// The JIT arguments of the kernel registered with `stub` (Proteus ABI): set once.
  /// The tracing client (trace_client.cpp, in this library) is told when a kernel's JIT
  /// arguments are set; hooks.h clients read them at launch.
  void set_jit_args(const void* stub, std::vector<kir_jit_arg> args) {
    const kir_hook_kernel* view = registry_.set_jit_args(stub, std::move(args));
    if (view && jit_args_observer) jit_args_observer(view);
  }
  /// Set once, by the tracing client's constructor, before any registration it traces.
  static inline void (*jit_args_observer)(const kir_hook_kernel* kernel) = nullptr;
  /// `resolve` is the registering runtime's cudaGetSymbolAddress (or HIP's twin).
  /// A variable the registration lists already is not listed again, nor told to clients.
  void global_registered(const void* handle, const void* host, const char* name, size_t size, SymbolResolver resolve);

  void allocated(uint64_t address, uint64_t size, int kind);
  void freed(uint64_t address);
  /// Serve a device allocation from the client allocator: true and `address` when it did.
  bool serve_allocation(uint64_t size, const void* stream, uint64_t& address);
  /// Give `address` back to the client allocator: true when it had served it.
  bool release_allocation(uint64_t address, const void* stream);

  /// Fill a launch event for `stub` (decoding arguments, hashing), or nullptr kernel
  /// (called only with a client loaded: without one the interposers count_launch());
  /// with `claim`, ask the clients' launch_override first (API 4): the event's
  /// outcome says what will run, and `claim->function` the substitute to launch.
  void launch_begin(kir_hook_launch& launch, Claim* claim = nullptr, Vendor vendor = Vendor::cuda_runtime);
  /// Tell clients the launch is done, each when its `completion` asks.
  void launch_completed(const kir_hook_launch& launch, const StreamOps* ops = nullptr) {
    clients_.completed(launch, ops);
  }
  /// A launch with no client loaded: counted (kir_hook_stats.launches), nothing else.
  void count_launch() { Counts::add(kLaunches); }
  bool has_clients() const { return clients_.any(); }
  void count_substitute_load() { ++substitute_loads_; }
  /// A CODE substitute client `client` claimed was loaded at `site` (load_site's
  /// answer): its on_loaded (API 7), when it has one. 0: launch it; else refused.
  int substitute_loaded(int client, const kir_hook_launch& launch, Vendor vendor, const void* site, kir_hash128 id,
                        void* module, void* function, const char* entry);

  /// kir_hook_add_client, or a KIR_HOOK_CLIENTS library's client (`source`: its
  /// path; a refusal is then printed always): 0, or -1 when refused.
  int add_client(const kir_hook_client* client, const std::string* source = nullptr);
  int set_allocator(const kir_hook_allocator* allocator) { return allocations_.set_allocator(allocator); }
  void stats(kir_hook_stats& out) const;

 private:
  Layer() = default;
  /// Put `record` under `handle` (a live registration there is unregistered first) and tell clients.
  void publish(const void* handle, std::unique_ptr<FatbinRecord> record, size_t images);
  void add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin);
  /// The launch identity of `launch` of kernel `k` (docs/hashing.md).
  static kir_hash128 launch_identity(KernelRecord& k, const kir_hook_launch& launch);
  void claim(kir_hook_launch& launch, Claim& claim, Vendor vendor);
  /// The launch's device, arch and context (API 7), from `vendor`'s traits.
  static void fill_device(kir_hook_launch& launch, Vendor vendor, const KernelRecord* k);

  Registry registry_;
  AllocationTracker allocations_;
  ClientTable clients_;
  ClientLoader loader_;
  std::atomic<uint64_t> substitute_loads_{0};
  std::atomic<const VendorTraits*> latest_traits_{nullptr};  // of the latest registration
  // Counted per launch: per-thread counters, no locked instruction (thread_counters.hpp).
  struct CountsTag {};
  using Counts = ThreadCounters<CountsTag, 4>;
  enum : size_t { kLaunches, kHandled, kSubstituted, kSubstituteFailures };
};

}  // namespace kir::hook
