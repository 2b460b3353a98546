// The recorder's device APIs (driver.hpp): CUDA's driver API and HIP's runtime API.
#include "driver.hpp"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>

#include "kir/hooks.h"
#include "kir_hook_internal/settings.hpp"

namespace kir::record {

namespace {

// ------------------------------------------------------------------ CUDA

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUmemGenericAllocationHandle = unsigned long long;

struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};

struct CUmemAllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requestedHandleTypes;  // none = 0
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType, gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
};

CUmemAllocationProp cuda_device_memory(int device) {
  CUmemAllocationProp p{};
  p.type = 1;                // CU_MEM_ALLOCATION_TYPE_PINNED
  p.location = {1, device};  // CU_MEM_LOCATION_TYPE_DEVICE
  return p;
}

class CudaDriver final : public RecorderDriver {
 public:
  /// The driver's own entry points: not the layer's interposers, which a dlsym of
  /// libcuda would hand out (kir/hooks.h, kir_hook_driver_symbol) and which would
  /// report the recorder's own allocations and copies as the app's.
  bool load(std::string& why) {
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
      why = std::string("cannot load libcuda.so.1: ") + dlerror();
      return false;
    }
    std::string missing;
    auto resolve = [&](const char* name, auto& out) {
      out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(kir_hook_driver_symbol(name));
      if (!out && missing.empty()) missing = name;
    };
    resolve("cuInit", cuInit);
    resolve("cuCtxGetCurrent", cuCtxGetCurrent);
    resolve("cuCtxSetCurrent", cuCtxSetCurrent);
    resolve("cuCtxGetDevice", cuCtxGetDevice);
    resolve("cuCtxSynchronize", cuCtxSynchronize);
    resolve("cuDeviceGet", cuDeviceGet);
    resolve("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain);
    resolve("cuDeviceGetName", cuDeviceGetName);
    resolve("cuDeviceGetAttribute", cuDeviceGetAttribute);
    resolve("cuMemAddressReserve", cuMemAddressReserve);
    resolve("cuMemAddressFree", cuMemAddressFree);
    resolve("cuMemCreate", cuMemCreate);
    resolve("cuMemRelease", cuMemRelease);
    resolve("cuMemMap", cuMemMap);
    resolve("cuMemUnmap", cuMemUnmap);
    resolve("cuMemSetAccess", cuMemSetAccess);
    resolve("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity);
    resolve("cuMemHostAlloc", cuMemHostAlloc);
    resolve("cuMemcpyDtoH_v2", cuMemcpyDtoH);
    resolve("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync);
    resolve("cuMemcpyDtoDAsync_v2", cuMemcpyDtoDAsync);
    resolve("cuMemAlloc_v2", cuMemAlloc);
    resolve("cuMemFree_v2", cuMemFree);
    resolve("cuStreamCreate", cuStreamCreate);
    resolve("cuStreamSynchronize", cuStreamSynchronize);
    resolve("cuPointerGetAttribute", cuPointerGetAttribute);
    resolve("cuGetErrorName", cuGetErrorName);
    if (!missing.empty()) why = "libcuda.so.1 lacks " + missing;
    return missing.empty();
  }

  const char* runtime() const override { return "CUDA"; }
  std::string error_name(int r) const override {
    const char* name = nullptr;
    if (cuGetErrorName(r, &name) != 0 || !name) name = "unknown CUDA error";
    return std::string(name) + " (" + std::to_string(r) + ")";
  }
  int ensure_context(std::string* why) const override {
    CUresult r = cuInit(0);
    CUcontext current = nullptr;
    if (r == 0) r = cuCtxGetCurrent(&current);
    if (r == 0 && !current) {
      CUdevice device = 0;
      if ((r = cuDeviceGet(&device, 0)) == 0 && (r = cuDevicePrimaryCtxRetain(&current, device)) == 0)
        r = cuCtxSetCurrent(current);
    }
    CUdevice device = -1;
    if (r == 0) r = cuCtxGetDevice(&device);
    if (r != 0 && why) *why = "no CUDA context could be made current: " + error_name(r);
    return r == 0 ? device : -1;
  }
  void describe(int device, std::string& name, std::string& arch) const override {
    char text[256] = {0};
    int major = 0, minor = 0;
    cuDeviceGetName(text, sizeof text, device);
    cuDeviceGetAttribute(&major, 75, device);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    cuDeviceGetAttribute(&minor, 76, device);  // ..._MINOR
    name = text, arch = "sm_" + std::to_string(major * 10 + minor);
  }
  uintptr_t current() const override {
    CUcontext context = nullptr;
    cuCtxGetCurrent(&context);
    return reinterpret_cast<uintptr_t>(context);
  }
  void make_current(uintptr_t site) const override { cuCtxSetCurrent(reinterpret_cast<CUcontext>(site)); }
  int synchronize() const override { return cuCtxSynchronize(); }
  int stream_create(void** stream) const override { return cuStreamCreate(stream, 1 /* CU_STREAM_NON_BLOCKING */); }
  int stream_synchronize(void* stream) const override { return cuStreamSynchronize(stream); }
  int host_alloc(void** p, size_t bytes) const override { return cuMemHostAlloc(p, bytes, 0); }
  int alloc(uint64_t* address, size_t bytes) const override {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, bytes);
    *address = p;
    return r;
  }
  int free(uint64_t address) const override { return cuMemFree(address); }
  int copy_to_host(void* to, uint64_t from, size_t bytes) const override { return cuMemcpyDtoH(to, from, bytes); }
  int copy_to_host_async(void* to, uint64_t from, size_t bytes, void* stream) const override {
    return cuMemcpyDtoHAsync(to, from, bytes, stream);
  }
  int copy_on_device_async(uint64_t to, uint64_t from, size_t bytes, void* stream) const override {
    return cuMemcpyDtoDAsync(to, from, bytes, stream);
  }
  int memory_type(uint64_t address, MemoryType& type) const override {
    int value = 0;  // CUmemorytype: HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4 (MemoryType's values)
    CUresult r = cuPointerGetAttribute(&value, 2 /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */, address);
    type = r == 0 && value >= 1 && value <= 4 ? MemoryType(value) : kUnknownMemory;
    return r;
  }
  int granularity(int device, size_t* bytes) const override {
    CUmemAllocationProp prop = cuda_device_memory(device);
    return cuMemGetAllocationGranularity(bytes, &prop, 0 /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */);
  }
  const char* reserve_call() const override { return "cuMemAddressReserve"; }
  int reserve(uint64_t* address, size_t bytes, size_t alignment, uint64_t at) const override {
    CUdeviceptr got = 0;
    CUresult r = cuMemAddressReserve(&got, bytes, alignment, at, 0);
    *address = got;
    return r;
  }
  int address_free(uint64_t address, size_t bytes) const override { return cuMemAddressFree(address, bytes); }
  int create(uint64_t* handle, size_t bytes, int device) const override {
    CUmemAllocationProp prop = cuda_device_memory(device);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cuMemCreate(&h, bytes, &prop, 0);
    *handle = h;
    return r;
  }
  int release(uint64_t handle) const override { return cuMemRelease(handle); }
  int map(uint64_t address, size_t bytes, uint64_t handle) const override {
    return cuMemMap(address, bytes, 0, handle, 0);
  }
  int unmap(uint64_t address, size_t bytes) const override { return cuMemUnmap(address, bytes); }
  int set_access(uint64_t address, size_t bytes, int device) const override {
    CUmemAccessDesc access{{1, device}, 3};  // read-write for this device
    return cuMemSetAccess(address, bytes, &access, 1);
  }

 private:
  CUresult (*cuInit)(unsigned);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*, int);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*cuGetErrorName)(CUresult, const char**);
};

// ------------------------------------------------------------------- HIP
//
// Every signature, enum value and struct below is ROCm's include/hip/hip_runtime_api.h,
// under the function's or type's own name there, read in two releases: Debian's
// libamdhip64-dev 5.2.3 (/usr/include/hip/hip_runtime_api.h) and ROCm 6.x
// (ROCm/HIP, include/hip/hip_runtime_api.h). Where they differ, both are kept and
// the one of the loaded runtime is used (hipRuntimeGetVersion: HIP_VERSION, i.e.
// major * 10000000 + minor * 100000 + patch, hip_version.h).

using hipError_t = int;
using hipDeviceptr_t = void*;
using hipStream_t = void*;
using hipMemGenericAllocationHandle_t = void*;  // struct ihipMemGenericAllocationHandle*

struct hipMemLocation {  // both releases
  int type;              // hipMemLocationTypeDevice = 1
  int id;
};
/// hipMemAllocationProp as ROCm 5.2 declares it (hip_runtime_api.h:6179).
struct hipMemAllocationProp_5 {
  unsigned char compressionType;
  hipMemLocation location;
  int requestedHandleType;
  int type;  // hipMemAllocationTypePinned = 0x1
  unsigned short usage;
  void* win32HandleMetaData;
};
/// hipMemAllocationProp as ROCm 6.x declares it (CUDA's CUmemAllocationProp order).
struct hipMemAllocationProp_6 {
  int type;
  int requestedHandleType;
  hipMemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType, gpuDirectRDMACapable;
    unsigned short usage;
  } allocFlags;
};
static_assert(offsetof(hipMemAllocationProp_5, location) == 4 && offsetof(hipMemAllocationProp_5, type) == 16 &&
              sizeof(hipMemAllocationProp_5) == 32);
static_assert(offsetof(hipMemAllocationProp_6, location) == 8 && sizeof(hipMemAllocationProp_6) == 32);
struct hipMemAccessDesc {  // both releases
  hipMemLocation location;
  int flags;  // hipMemAccessFlagsProtReadWrite = 3
};
/// hipPointerAttribute_t's first member is the memory type in both releases (5.2:
/// `memoryType`, 6.x: `type`); the rest as 5.2 and 6.x declare it.
struct hipPointerAttribute_t {
  int type;
  int device;
  void* devicePointer;
  void* hostPointer;
  int isManaged;
  unsigned allocationFlags;
};

class HipDriver final : public RecorderDriver {
 public:
  bool load(std::string& why) {
    void* lib = nullptr;
    const char* names[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
    std::string errors;
    for (const char* name : names) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      errors += std::string(errors.empty() ? "" : "; ") + dlerror();
    }
    if (!lib) {
      why = "cannot load the HIP runtime (libamdhip64.so): " + errors;
      return false;
    }
    // By handle: the runtime's own entry points, never the layer's interposers
    // (its dlsym interposer answers driver names, "cu...", only: libkir/hook/dlsym.cpp).
    std::string missing;
    auto resolve = [&](const char* name, auto& out) {
      out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(dlsym(lib, name));
      if (!out && missing.empty()) missing = name;
    };
    resolve("hipInit", hipInit);
    resolve("hipRuntimeGetVersion", hipRuntimeGetVersion);
    resolve("hipGetDeviceCount", hipGetDeviceCount);
    resolve("hipGetDevice", hipGetDevice);
    resolve("hipSetDevice", hipSetDevice);
    resolve("hipDeviceGetName", hipDeviceGetName);
    resolve("hipGetDeviceProperties", hipGetDeviceProperties);
    resolve("hipDeviceSynchronize", hipDeviceSynchronize);
    resolve("hipStreamCreateWithFlags", hipStreamCreateWithFlags);
    resolve("hipStreamSynchronize", hipStreamSynchronize);
    resolve("hipHostMalloc", hipHostMalloc);
    resolve("hipMalloc", hipMalloc);
    resolve("hipFree", hipFree);
    resolve("hipMemcpyDtoH", hipMemcpyDtoH);
    resolve("hipMemcpyDtoHAsync", hipMemcpyDtoHAsync);
    resolve("hipMemcpyDtoDAsync", hipMemcpyDtoDAsync);
    resolve("hipPointerGetAttributes", hipPointerGetAttributes);
    resolve("hipMemGetAllocationGranularity", hipMemGetAllocationGranularity);
    resolve("hipMemAddressReserve", hipMemAddressReserve);
    resolve("hipMemAddressFree", hipMemAddressFree);
    resolve("hipMemCreate", hipMemCreate);
    resolve("hipMemRelease", hipMemRelease);
    resolve("hipMemMap", hipMemMap);
    resolve("hipMemUnmap", hipMemUnmap);
    resolve("hipMemSetAccess", hipMemSetAccess);
    resolve("hipGetErrorName", hipGetErrorName);
    // ROCm 6.x: hipDeviceProp_tR0600 through hipGetDevicePropertiesR0600 (what
    // hip_runtime_api.h's `#define hipGetDeviceProperties hipGetDevicePropertiesR0600`
    // makes every 6.x caller call); absent from 5.x, whose hipGetDeviceProperties fills 5.2's hipDeviceProp_t.
    hipGetDevicePropertiesR0600 =
        reinterpret_cast<decltype(hipGetDevicePropertiesR0600)>(dlsym(lib, "hipGetDevicePropertiesR0600"));
    if (!missing.empty()) {
      why = "the HIP runtime lacks " + missing;
      return false;
    }
    int version = 0;
    if (hipRuntimeGetVersion(&version) == 0) version_ = version;
    return true;
  }

  const char* runtime() const override { return "HIP"; }
  std::string error_name(int r) const override {
    const char* name = hipGetErrorName(r);
    return std::string(name ? name : "unknown HIP error") + " (" + std::to_string(r) + ")";
  }
  int ensure_context(std::string* why) const override {
    // The first call that fails is named: without a GPU ROCm 5.2's hipInit answers
    // hipErrorInvalidDevice (101), the stub's hipErrorNoDevice (100).
    const char* call = "hipInit";
    hipError_t r = hipInit(0);
    int count = 0, device = -1;
    if (r == 0) call = "hipGetDeviceCount", r = hipGetDeviceCount(&count);
    if (r == 0 && count == 0) r = 100;  // hipErrorNoDevice
    if (r == 0) call = "hipGetDevice", r = hipGetDevice(&device);
    if (r != 0 && why) *why = std::string("no HIP device: ") + call + ": " + error_name(r);
    return r == 0 ? device : -1;
  }
  void describe(int device, std::string& name, std::string& arch) const override {
    char text[256] = {0};
    hipDeviceGetName(text, sizeof text, device);
    name = text;
    // gcnArchName (char[256]): at byte 1160 of hipDeviceProp_tR0600 (1472 bytes, ROCm 6.x),
    // at byte 396 of 5.2's hipDeviceProp_t (792 bytes); offsetof on each header.
    alignas(8) char prop[2048] = {0};
    size_t at = 0;
    if (hipGetDevicePropertiesR0600 && hipGetDevicePropertiesR0600(prop, device) == 0) at = 1160;
    else if (!hipGetDevicePropertiesR0600 && hipGetDeviceProperties(prop, device) == 0) at = 396;
    arch = at ? std::string(prop + at, strnlen(prop + at, 256)) : "";
  }
  uintptr_t current() const override {
    int device = 0;
    return hipGetDevice(&device) == 0 ? uintptr_t(device) + 1 : 0;
  }
  void make_current(uintptr_t site) const override {
    if (site) hipSetDevice(int(site - 1));
  }
  int synchronize() const override { return hipDeviceSynchronize(); }
  int stream_create(void** stream) const override {
    return hipStreamCreateWithFlags(stream, 0x01 /* hipStreamNonBlocking */);
  }
  int stream_synchronize(void* stream) const override { return hipStreamSynchronize(stream); }
  int host_alloc(void** p, size_t bytes) const override {
    return hipHostMalloc(p, bytes, 0 /* hipHostMallocDefault */);
  }
  int alloc(uint64_t* address, size_t bytes) const override {
    void* p = nullptr;
    hipError_t r = hipMalloc(&p, bytes);
    *address = reinterpret_cast<uintptr_t>(p);
    return r;
  }
  int free(uint64_t address) const override { return hipFree(pointer(address)); }
  int copy_to_host(void* to, uint64_t from, size_t bytes) const override {
    return hipMemcpyDtoH(to, pointer(from), bytes);
  }
  int copy_to_host_async(void* to, uint64_t from, size_t bytes, void* stream) const override {
    return hipMemcpyDtoHAsync(to, pointer(from), bytes, stream);
  }
  int copy_on_device_async(uint64_t to, uint64_t from, size_t bytes, void* stream) const override {
    return hipMemcpyDtoDAsync(pointer(to), pointer(from), bytes, stream);
  }
  int memory_type(uint64_t address, MemoryType& type) const override {
    hipPointerAttribute_t a{};
    hipError_t r = hipPointerGetAttributes(&a, pointer(address));
    type = kUnknownMemory;
    if (r != 0) return r;
    if (version_ >= 60000000) {  // 6.x: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11
      static const MemoryType six[] = {kUnknownMemory, kHostMemory, kDeviceMemory, kUnifiedMemory};
      type = a.type >= 0 && a.type < 4 ? six[a.type] : a.type == 10 ? kArrayMemory : kUnifiedMemory;
    } else {  // 5.2: Host 0, Device 1, Array 2, Unified 3
      static const MemoryType five[] = {kHostMemory, kDeviceMemory, kArrayMemory, kUnifiedMemory};
      type = a.type >= 0 && a.type < 4 ? five[a.type] : kUnknownMemory;
    }
    if (a.isManaged) type = kUnifiedMemory;
    return type == kUnknownMemory ? 1 /* hipErrorInvalidValue: not a pointer HIP knows */ : 0;
  }
  int granularity(int device, size_t* bytes) const override {
    Prop prop = device_memory(device);
    return hipMemGetAllocationGranularity(bytes, &prop, 0 /* hipMemAllocationGranularityMinimum */);
  }
  const char* reserve_call() const override { return "hipMemAddressReserve"; }
  int reserve(uint64_t* address, size_t bytes, size_t alignment, uint64_t at) const override {
    void* got = nullptr;
    hipError_t r = hipMemAddressReserve(&got, bytes, alignment, pointer(at), 0);
    *address = reinterpret_cast<uintptr_t>(got);
    return r;
  }
  int address_free(uint64_t address, size_t bytes) const override { return hipMemAddressFree(pointer(address), bytes); }
  int create(uint64_t* handle, size_t bytes, int device) const override {
    Prop prop = device_memory(device);
    hipMemGenericAllocationHandle_t h = nullptr;
    hipError_t r = hipMemCreate(&h, bytes, &prop, 0);
    *handle = reinterpret_cast<uintptr_t>(h);
    return r;
  }
  int release(uint64_t handle) const override { return hipMemRelease(pointer(handle)); }
  int map(uint64_t address, size_t bytes, uint64_t handle) const override {
    return hipMemMap(pointer(address), bytes, 0, pointer(handle), 0);
  }
  int unmap(uint64_t address, size_t bytes) const override { return hipMemUnmap(pointer(address), bytes); }
  int set_access(uint64_t address, size_t bytes, int device) const override {
    hipMemAccessDesc access{{1 /* hipMemLocationTypeDevice */, device}, 3 /* hipMemAccessFlagsProtReadWrite */};
    return hipMemSetAccess(pointer(address), bytes, &access, 1);
  }

 private:
  static void* pointer(uint64_t address) { return reinterpret_cast<void*>(uintptr_t(address)); }
  /// Pinned device memory on `device`, in the loaded release's hipMemAllocationProp.
  union Prop {
    hipMemAllocationProp_5 five;
    hipMemAllocationProp_6 six;
  };
  Prop device_memory(int device) const {
    Prop p;
    std::memset(&p, 0, sizeof p);
    if (version_ >= 60000000) {
      p.six.type = 1;  // hipMemAllocationTypePinned
      p.six.location = {1, device};
    } else {
      p.five.type = 1;
      p.five.location = {1, device};
    }
    return p;
  }

  int version_ = 0;
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipRuntimeGetVersion)(int*);
  hipError_t (*hipGetDeviceCount)(int*);
  hipError_t (*hipGetDevice)(int*);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipDeviceGetName)(char*, int, int);
  hipError_t (*hipGetDeviceProperties)(void*, int);
  hipError_t (*hipGetDevicePropertiesR0600)(void*, int) = nullptr;
  hipError_t (*hipDeviceSynchronize)();
  hipError_t (*hipStreamCreateWithFlags)(hipStream_t*, unsigned);
  hipError_t (*hipStreamSynchronize)(hipStream_t);
  hipError_t (*hipHostMalloc)(void**, size_t, unsigned);
  hipError_t (*hipMalloc)(void**, size_t);
  hipError_t (*hipFree)(void*);
  hipError_t (*hipMemcpyDtoH)(void*, hipDeviceptr_t, size_t);
  hipError_t (*hipMemcpyDtoHAsync)(void*, hipDeviceptr_t, size_t, hipStream_t);
  hipError_t (*hipMemcpyDtoDAsync)(hipDeviceptr_t, hipDeviceptr_t, size_t, hipStream_t);
  hipError_t (*hipPointerGetAttributes)(hipPointerAttribute_t*, const void*);
  hipError_t (*hipMemGetAllocationGranularity)(size_t*, const void*, int);
  hipError_t (*hipMemAddressReserve)(void**, size_t, size_t, void*, unsigned long long);
  hipError_t (*hipMemAddressFree)(void*, size_t);
  hipError_t (*hipMemCreate)(hipMemGenericAllocationHandle_t*, size_t, const void*, unsigned long long);
  hipError_t (*hipMemRelease)(hipMemGenericAllocationHandle_t);
  hipError_t (*hipMemMap)(void*, size_t, size_t, hipMemGenericAllocationHandle_t, unsigned long long);
  hipError_t (*hipMemUnmap)(void*, size_t);
  hipError_t (*hipMemSetAccess)(void*, size_t, const hipMemAccessDesc*, size_t);
  const char* (*hipGetErrorName)(hipError_t);
};

template <class D>
const RecorderDriver* loaded(std::string* why) {
  static std::string failure;
  static D* driver = [] {
    auto* d = new D();  // lives as long as the process
    if (!d->load(failure)) {
      delete d;
      return static_cast<D*>(nullptr);
    }
    return d;
  }();
  if (!driver && why) *why = failure;
  return driver;
}

bool hip_loaded() {
  for (const char* name : {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"})
    if (dlopen(name, RTLD_LAZY | RTLD_NOLOAD)) return true;
  return false;
}

}  // namespace

const RecorderDriver* cuda_driver(std::string* why) { return loaded<CudaDriver>(why); }
const RecorderDriver* hip_driver(std::string* why) { return loaded<HipDriver>(why); }

const RecorderDriver* RecorderDriver::get(std::string* why) {
  const char* vendor = kir::hook::setting("KIR_RECORD_VENDOR");
  std::string v = vendor ? vendor : "";
  if (v == "hip" || (v.empty() && hip_loaded())) return hip_driver(why);
  if (v.empty() || v == "cuda") return cuda_driver(why);
  if (why) *why = "KIR_RECORD_VENDOR=" + v + ": expected cuda or hip";
  return nullptr;
}

}  // namespace kir::record
