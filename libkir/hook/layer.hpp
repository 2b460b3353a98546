// The hook layer's state: registry, allocation tracker, clients, failure
// count. Private to libkir_hook.so; the interposers (cuda_runtime.cpp,
// driver_api.cpp, hip_runtime.cpp, proteus_abi.cpp) feed it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kir/device_code.hpp"
#include "kir/cuda/fatbin.hpp"
#include "kir/support/compression.hpp"
#include "kir/hash/hash.hpp"
#include "kir/hooks.h"
#include "thread_counters.hpp"

namespace kir::hook {

/// Marks the calling thread as inside an interposed runtime call, whose own
/// driver calls (cuLaunchKernel, cuMemAlloc ...) are therefore not reported again.
class RuntimeCall {
 public:
  RuntimeCall() { ++depth(); }
  ~RuntimeCall() { --depth(); }
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    static thread_local int d KIR_TLS_INITIAL_EXEC = 0;  // static TLS: no __tls_get_addr per launch
    return d;
  }
};

/// The compute capability (e.g. 90) of device 0 as the CUDA driver reports it,
/// or 0 without a driver or device. Asked once per process; registration runs
/// before main, when device 0 is the current device.
int device_compute_capability();

/// How the interposing runtime waits for a launch (cudaStreamSynchronize and
/// cudaLaunchHostFunc, or their driver/HIP twins), for clients that want
/// launch_completed once the kernel is done.
struct StreamOps {
  int (*synchronize)(void* stream);
  int (*enqueue_host)(void* stream, void (*fn)(void*), void* data);
};

/// cudaGetSymbolAddress / hipGetSymbolAddress: (device address out, host symbol) -> error.
using SymbolResolver = int (*)(void** device, const void* host);

/// A registered device variable; the C view handed to clients points into it.
struct GlobalRecord {
  std::string name;
  kir_hook_global view{};
  SymbolResolver resolve = nullptr;
  std::atomic<uint64_t> device_address{0};
};

struct KernelRecord;

/// A registered fatbin or loaded module, parsed. `container` views the app's
/// own memory (a registered fatbin) or `owned` (a driver-loaded one, copied at
/// load: the app may free its buffer); it is dropped when the fatbin is
/// unregistered, so nothing reads an unloaded library's image.
struct FatbinRecord {
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

/// Why the layer could not use something it was handed (KIR_HOOK_LOG): counted
/// in kir_hook_stats.failures; with KIR_HOOK_LOG=1 one line on stderr each
/// (KIR_HOOK_LOG=PATH: appended to PATH): "kir-hook: error: WHAT: DETAIL".
/// `always`: printed even without KIR_HOOK_LOG (a client the user named cannot be loaded).
void report_failure(const std::string& what, const std::string& detail, bool always = false);
uint64_t failure_count();
/// "fatbin 0x55d0c0a0" — how failure lines name a registration handle.
std::string describe(const char* noun, const void* handle);

/// Which runtime a launch came through: how a claimed substitute is loaded and launched.
enum class Vendor {
  cuda_runtime,  // the CUDA runtime API (and the Proteus launch ABI): may make the primary context current
  cuda_driver,   // the driver API: the app's current context
  hip,
};

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

  void fatbin_registered(const void* handle, const void* wrapper);
  /// __cudaUnregisterFatBinary / __hipUnregisterFatBinary / cuModuleUnload /
  /// cuLibraryUnload: tells clients (fatbin_unregistered), then retires the
  /// registration: its kernels and globals stay as views marked `unloaded`,
  /// nothing keeps a view of its image. Call before the real unregister.
  /// `api` names the call for a failure line when `handle` is unknown (nullptr:
  /// an unknown handle is not a failure, as for modules loaded in ways the
  /// layer does not see).
  void fatbin_unregistered(const void* handle, const char* api);
  /// HIP's __hipRegisterFatBinary: `wrapper` is {"HIPF", version, offload bundle}.
  void hip_fatbin_registered(const void* handle, const void* wrapper);
  void kernel_registered(const void* handle, const void* stub, const char* name);
  /// A module loaded through the driver API (cuModuleLoadData...): `image` is a
  /// cubin, PTX text or a fatbin container, sized from its own headers.
  void module_loaded(const void* module, const void* image);
  /// Launches by `alias` are launches of the kernel registered as `of` (a CUkernel's
  /// CUfunction); nothing when `of` is not a live kernel.
  void function_alias(const void* alias, const void* of);
  /// A function looked up in such a module (cuModuleGetFunction, cuLibraryGetKernel).
  void function_found(const void* module, const void* function, const char* name);
  /// A runtime kernel handle (cudaKernel_t) for a host stub, and back.
  void kernel_handle_found(const void* handle, const void* stub);
  const void* stub_of_handle(const void* handle) const;  // `handle` itself when unknown
  size_t kernel_count() const;
  const kir_hook_kernel* kernel_at(size_t index) const;
  /// `resolve` is the registering runtime's cudaGetSymbolAddress (or HIP's twin).
  void global_registered(const void* handle, const void* host, const char* name, size_t size,
                         SymbolResolver resolve);
  size_t global_count() const;
  const kir_hook_global* global_at(size_t index) const;
  uint64_t global_device_address(const void* host);
  void allocated(uint64_t address, uint64_t size, int kind);
  void freed(uint64_t address);

  /// The registered kernel behind a host stub or CUfunction, or nullptr.
  const kir_hook_kernel* kernel_view(const void* stub);

  /// Fill a launch event for `stub` (decoding arguments, hashing), or nullptr kernel
  /// (called only with a client loaded: without one the interposers count_launch());
  /// with `claim`, ask the clients' launch_override first (API 4): the event's
  /// outcome says what will run, and `claim->function` the substitute to launch.
  void launch_begin(kir_hook_launch& launch, Claim* claim = nullptr, Vendor vendor = Vendor::cuda_runtime);
  /// A launch with no client loaded: counted (kir_hook_stats.launches), nothing else.
  void count_launch() { Counts::add(kLaunches); }
  /// Whether any client has a launch_override (a relaxed load: the hot path's only cost).
  bool overriding() const { return has_override_.load(std::memory_order_relaxed); }
  /// Whether any client listens: without one, launches need no kernel lookup.
  bool has_clients() const { return client_count_.load(std::memory_order_acquire) != 0; }
  /// What some client reads of a launch event (kNeeds*: from kir_hook_client.launch_skips, API 5).
  static constexpr uint32_t kNeedsKernel = 1, kNeedsIdentity = 2;
  void count_substitute_load() { ++substitute_loads_; }
  /// The JIT arguments of the kernel registered with `stub` (Proteus ABI): set once.
  void set_jit_args(const void* stub, std::vector<kir_jit_arg> args);
  /// The embedded IR modules of a kernel's code (API 4), as its static hash covers them.
  size_t kernel_ir_count(const kir_hook_kernel* kernel);
  bool kernel_ir(const kir_hook_kernel* kernel, size_t index, kir_bytes& out);
  /// Tell clients the launch is done, each when its `completion` asks (with `ops`;
  /// without them, or for a failed launch, at once).
  void launch_completed(const kir_hook_launch& launch, const StreamOps* ops = nullptr);

  int add_client(const kir_hook_client* client);
  bool find_allocation(uint64_t address, kir_hook_allocation& out) const;
  void for_each_allocation(void (*visit)(void*, const kir_hook_allocation*), void* user) const;
  /// The device code of a registered kernel (KIR_CODE_*), decoded on first request.
  bool kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code& out);
  /// The relocatable units of a device-linked kernel's registration: their count,
  /// and the PTX of unit `index` (decoded on first request).
  size_t kernel_code_units(const kir_hook_kernel* kernel);
  bool kernel_code_unit(const kir_hook_kernel* kernel, size_t index, kir_hook_code& out);
  /// A client's allocator for device allocations (one per process).
  int set_allocator(const kir_hook_allocator* allocator);
  /// Serve a device allocation from the client allocator: true and `address` when it did.
  bool serve_allocation(uint64_t size, const void* stream, uint64_t& address);
  /// Give `address` back to the client allocator: true when it had served it.
  bool release_allocation(uint64_t address, const void* stream);
  bool tag_allocation(uint64_t address, void* tag);
  void stats(kir_hook_stats& out) const;

 private:
  Layer() = default;
  /// Load the clients KIR_HOOK_CLIENTS names, once; get() calls it after the
  /// layer exists, never inside the static's initialization: loading a client
  /// (dlopen) can run this library's own constructors — when the layer is first
  /// entered before them, from an earlier library's constructor — and the
  /// tracing client's (trace_client.cpp) enters the layer again. The loading
  /// thread goes on with the layer as it is; another thread waits for the clients.
  void load_clients();
  void load_clients_from_environment();
  int install_allocator(const kir_hook_allocator* allocator);  // under clients_mutex_
  KernelRecord* kernel_for(const void* stub);
  /// The live registration of `kernel` (not a stale view of an earlier load), or nullptr.
  FatbinRecord* live_fatbin_of(const kir_hook_kernel* kernel);
  void decode(FatbinRecord& f, const void* handle);
  /// Put `record` under `handle`, retiring a live registration there first.
  void publish(const void* handle, std::unique_ptr<FatbinRecord> record, size_t images);
  /// Remove the registration under `handle` (registry lock held): mark its
  /// kernels and globals unloaded, drop its image views. Returns false when none.
  bool retire(const void* handle);
  template <class Fn>
  void each_client(Fn&& fn);

  mutable std::shared_mutex registry_mutex_;
  std::unordered_map<const void*, std::unique_ptr<FatbinRecord>> fatbins_;  // live ones
  std::unordered_map<const void*, KernelRecord*> kernels_;  // live ones, by host stub / CUfunction
  std::atomic<uint64_t> kernels_generation_{1};  ///< bumped at each change of kernels_ (kernel_for's per-thread answers)
  std::vector<std::unique_ptr<KernelRecord>> kernel_order_;  // all, never freed (kir_hook_kernel_at)
  std::vector<std::unique_ptr<FatbinRecord>> retired_;  // unregistered, kept for their kernels' views
  std::atomic<uint64_t> unregistered_{0};
  std::unordered_map<const void*, const void*> stub_by_handle_;  // cudaKernel_t -> host stub
  void add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin);
  std::vector<std::unique_ptr<GlobalRecord>> globals_order_;
  std::unordered_map<const void*, GlobalRecord*> globals_by_host_;

  mutable std::shared_mutex allocations_mutex_;
  std::map<uint64_t, kir_hook_allocation> allocations_;  // by start address

  // Append-only: a client is written, then published by the count (release), so
  // events read the first client_count_ entries without a lock or a copy.
  static constexpr size_t kMaxClients = 16;
  std::mutex clients_mutex_;  // between clients being added
  std::array<kir_hook_client, kMaxClients> clients_{};
  std::atomic<size_t> client_count_{0};
  std::mutex clients_loading_;  // held while the KIR_HOOK_CLIENTS clients load
  std::atomic<bool> clients_loaded_{false};
  kir_hook_allocator allocator_{};
  std::atomic<bool> has_allocator_{false};
  std::atomic<bool> has_override_{false};
  std::atomic<uint32_t> launch_needs_{0};  ///< kNeeds* of every client, or'ed
  std::atomic<uint64_t> substitute_loads_{0};
  // Counted per launch: per-thread counters, no locked instruction (thread_counters.hpp).
  struct CountsTag {};
  using Counts = ThreadCounters<CountsTag, 4>;
  enum : size_t { kLaunches, kHandled, kSubstituted, kSubstituteFailures };
};

}  // namespace kir::hook
