// The device API the recorder uses, one table per vendor (CUDA: libcuda.so.1's
// driver API; HIP: libamdhip64.so's), found at run time (libkir has no CUDA or
// ROCm build dependency) and used by the recorder through one interface: the
// recorder, its snapshotter and its VA allocator never branch on the vendor. A
// vendor is added by an implementation of its own (driver.cpp: CudaDriver,
// HipDriver), as the hook adds one by its VendorTraits (libkir/hook/vendor.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kir::record {

/// What a pointer is, as the runtime's pointer attributes say.
enum MemoryType { kUnknownMemory = 0, kHostMemory = 1, kDeviceMemory = 2, kArrayMemory = 3, kUnifiedMemory = 4 };

/// A device API's entry points as the recorder needs them. Every call returns the
/// runtime's own status (0: success), which error_name() names.
class RecorderDriver {
 public:
  virtual ~RecorderDriver() = default;
  /// The driver of the runtime this process uses (KIR_RECORD_VENDOR=cuda|hip, else
  /// HIP when libamdhip64 is loaded, else CUDA), loaded once; nullptr and `why`
  /// when its library or an entry point is missing.
  static const RecorderDriver* get(std::string* why = nullptr);

  /// "CUDA", "HIP".
  virtual const char* runtime() const = 0;
  /// "CUDA_ERROR_OUT_OF_MEMORY (2)", "hipErrorNoDevice (100)".
  virtual std::string error_name(int r) const = 0;
  /// Make a device current on this thread when none is (CUDA: the primary context,
  /// as the runtime does; HIP: the current device): its ordinal, or -1 and `why`.
  virtual int ensure_context(std::string* why = nullptr) const = 0;
  /// The device's name and arch ("sm_90"; "gfx942:sramecc+:xnack-").
  virtual void describe(int device, std::string& name, std::string& arch) const = 0;
  /// What is current on this thread (CUDA: the context; HIP: the device), to be made
  /// current on another thread by make_current.
  virtual uintptr_t current() const = 0;
  virtual void make_current(uintptr_t site) const = 0;
  /// Wait for all work of the current context (device).
  virtual int synchronize() const = 0;
  virtual int stream_create(void** stream) const = 0;  // non-blocking
  virtual int stream_synchronize(void* stream) const = 0;
  virtual int host_alloc(void** p, size_t bytes) const = 0;  // pinned
  virtual int alloc(uint64_t* address, size_t bytes) const = 0;
  virtual int free(uint64_t address) const = 0;
  virtual int copy_to_host(void* to, uint64_t from, size_t bytes) const = 0;
  virtual int copy_to_host_async(void* to, uint64_t from, size_t bytes, void* stream) const = 0;
  virtual int copy_on_device_async(uint64_t to, uint64_t from, size_t bytes, void* stream) const = 0;
  /// What `address` points to: 0 and `type`, or the runtime's error (not a pointer it knows).
  virtual int memory_type(uint64_t address, MemoryType& type) const = 0;

  // Virtual memory: an address range reserved, physical memory created, mapped into
  // it and made readable and writable by `device` (docs/recording.md).
  virtual int granularity(int device, size_t* bytes) const = 0;
  virtual const char* reserve_call() const = 0;  // reserve's entry point, for failure lines
  virtual int reserve(uint64_t* address, size_t bytes, size_t alignment, uint64_t at) const = 0;
  virtual int address_free(uint64_t address, size_t bytes) const = 0;
  virtual int create(uint64_t* handle, size_t bytes, int device) const = 0;
  virtual int release(uint64_t handle) const = 0;
  virtual int map(uint64_t address, size_t bytes, uint64_t handle) const = 0;
  virtual int unmap(uint64_t address, size_t bytes) const = 0;
  virtual int set_access(uint64_t address, size_t bytes, int device) const = 0;
};

/// Each vendor's driver, loaded once: nullptr and `why` when it cannot be.
const RecorderDriver* cuda_driver(std::string* why);
const RecorderDriver* hip_driver(std::string* why);

}  // namespace kir::record
