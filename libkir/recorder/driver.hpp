// The CUDA driver entry points the recorder uses, found in libcuda.so.1 at run
// time (libkir has no CUDA build dependency). The few driver types it needs
// are declared here as the driver API defines them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kir::record {

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

/// Memory types cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) reports.
enum MemoryType { kHostMemory = 1, kDeviceMemory = 2, kArrayMemory = 3, kUnifiedMemory = 4 };

struct Driver {
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

  /// The driver, loaded once; nullptr (and `why`) when libcuda or a symbol is missing.
  static const Driver* get(std::string* why = nullptr);
  /// "CUDA_ERROR_OUT_OF_MEMORY (2)".
  std::string error_name(CUresult r) const;
  /// Make the device's primary context current on this thread when none is
  /// (the runtime uses the same one); the current device, or -1.
  int ensure_context() const;
};

}  // namespace kir::record
