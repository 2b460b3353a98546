// The hook layer's state: registry, allocation tracker, clients. Private to
// libkir_hook.so; the interposers (cuda_runtime.cpp) feed it.
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
    thread_local int d = 0;
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

/// A registered fatbin: the app's own container bytes, parsed.
struct FatbinRecord {
  const void* handle = nullptr;
  std::optional<FatbinContainer> container;
  std::optional<DeviceCode> code;  // of the image launches will use (decoded on first need)
  std::string arch;                // that image's target
  bool decoded = false;
  const FatbinEntry* chosen = nullptr;  // the container entry `code` came from
  // The code's bytes for clients that ask (kir_hook_kernel_code): decoded on
  // first request and kept; a driver-loaded bare image is copied at load.
  std::mutex code_mutex;
  std::vector<uint8_t> launched_bytes, ptx_bytes;
  std::string ptx_arch;
  bool launched_ready = false, ptx_ready = false;
};

/// A registered kernel; the C view handed to clients points into it.
struct KernelRecord {
  std::string name;
  FatbinRecord* fatbin = nullptr;
  std::vector<uint32_t> offsets, sizes;
  kir_hook_kernel view{};
};

class Layer {
 public:
  static Layer& get();

  void fatbin_registered(const void* handle, const void* wrapper);
  /// HIP's __hipRegisterFatBinary: `wrapper` is {"HIPF", version, offload bundle}.
  void hip_fatbin_registered(const void* handle, const void* wrapper);
  void kernel_registered(const void* handle, const void* stub, const char* name);
  /// A module loaded through the driver API (cuModuleLoadData...): `image` is a
  /// cubin, PTX text or a fatbin container, sized from its own headers.
  void module_loaded(const void* module, const void* image);
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

  /// Fill a launch event for `stub` (decoding arguments, hashing), or nullptr kernel.
  void launch_begin(kir_hook_launch& launch);
  /// Tell clients the launch is done, each when its `completion` asks (with `ops`;
  /// without them, or for a failed launch, at once).
  void launch_completed(const kir_hook_launch& launch, const StreamOps* ops = nullptr);

  int add_client(const kir_hook_client* client);
  bool find_allocation(uint64_t address, kir_hook_allocation& out) const;
  void for_each_allocation(void (*visit)(void*, const kir_hook_allocation*), void* user) const;
  /// The device code of a registered kernel (KIR_CODE_*), decoded on first request.
  bool kernel_code(const kir_hook_kernel* kernel, int which, kir_hook_code& out);
  /// A client's allocator for device allocations (one per process).
  int set_allocator(const kir_hook_allocator* allocator);
  /// Serve a device allocation from the client allocator: true and `address` when it did.
  bool serve_allocation(uint64_t size, const void* stream, uint64_t& address);
  /// Give `address` back to the client allocator: true when it had served it.
  bool release_allocation(uint64_t address, const void* stream);
  bool tag_allocation(uint64_t address, void* tag);
  void stats(kir_hook_stats& out) const;

 private:
  Layer();
  void load_clients_from_environment();
  int install_allocator(const kir_hook_allocator* allocator);  // under clients_mutex_
  KernelRecord* kernel_for(const void* stub);
  void decode(FatbinRecord& f);
  template <class Fn>
  void each_client(Fn&& fn);

  mutable std::shared_mutex registry_mutex_;
  std::unordered_map<const void*, std::unique_ptr<FatbinRecord>> fatbins_;
  std::unordered_map<const void*, std::unique_ptr<KernelRecord>> kernels_;  // by host stub / CUfunction
  std::vector<const KernelRecord*> kernel_order_;
  std::unordered_map<const void*, const void*> stub_by_handle_;  // registration order, for kir_hook_kernel_at
  void add_kernel(const void* handle, const void* stub, const char* name, FatbinRecord* fatbin);
  std::vector<std::unique_ptr<GlobalRecord>> globals_order_;
  std::unordered_map<const void*, GlobalRecord*> globals_by_host_;
  std::atomic<uint64_t> launches_{0};

  mutable std::shared_mutex allocations_mutex_;
  std::map<uint64_t, kir_hook_allocation> allocations_;  // by start address

  // Append-only: a client is written, then published by the count (release), so
  // events read the first client_count_ entries without a lock or a copy.
  static constexpr size_t kMaxClients = 16;
  std::mutex clients_mutex_;  // between clients being added
  std::array<kir_hook_client, kMaxClients> clients_{};
  std::atomic<size_t> client_count_{0};
  kir_hook_allocator allocator_{};
  std::atomic<bool> has_allocator_{false};
};

}  // namespace kir::hook
