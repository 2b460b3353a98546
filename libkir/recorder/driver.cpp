// Loading the CUDA driver entry points (driver.hpp).
#include "driver.hpp"

#include <dlfcn.h>

#include "kir/hooks.h"

namespace kir::record {

namespace {

/// The driver's own `name`: not the layer's interposer, which a dlsym of libcuda
/// would hand out (kir/hooks.h, kir_hook_driver_symbol) and which would report the
/// recorder's own allocations and copies as the app's.
template <class F>
bool resolve(void*, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(kir_hook_driver_symbol(name));
  if (!out && missing.empty()) missing = name;
  return out != nullptr;
}

Driver load(std::string& why) {
  Driver d{};
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = std::string("cannot load libcuda.so.1: ") + dlerror();
    return d;
  }
  std::string missing;
  resolve(lib, "cuInit", d.cuInit, missing);
  resolve(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent, missing);
  resolve(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent, missing);
  resolve(lib, "cuCtxGetDevice", d.cuCtxGetDevice, missing);
  resolve(lib, "cuCtxSynchronize", d.cuCtxSynchronize, missing);
  resolve(lib, "cuDeviceGet", d.cuDeviceGet, missing);
  resolve(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, missing);
  resolve(lib, "cuDeviceGetName", d.cuDeviceGetName, missing);
  resolve(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, missing);
  resolve(lib, "cuMemAddressReserve", d.cuMemAddressReserve, missing);
  resolve(lib, "cuMemAddressFree", d.cuMemAddressFree, missing);
  resolve(lib, "cuMemCreate", d.cuMemCreate, missing);
  resolve(lib, "cuMemRelease", d.cuMemRelease, missing);
  resolve(lib, "cuMemMap", d.cuMemMap, missing);
  resolve(lib, "cuMemUnmap", d.cuMemUnmap, missing);
  resolve(lib, "cuMemSetAccess", d.cuMemSetAccess, missing);
  resolve(lib, "cuMemGetAllocationGranularity", d.cuMemGetAllocationGranularity, missing);
  resolve(lib, "cuMemHostAlloc", d.cuMemHostAlloc, missing);
  resolve(lib, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, missing);
  resolve(lib, "cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync, missing);
  resolve(lib, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync, missing);
  resolve(lib, "cuMemAlloc_v2", d.cuMemAlloc, missing);
  resolve(lib, "cuMemFree_v2", d.cuMemFree, missing);
  resolve(lib, "cuStreamCreate", d.cuStreamCreate, missing);
  resolve(lib, "cuStreamSynchronize", d.cuStreamSynchronize, missing);
  resolve(lib, "cuPointerGetAttribute", d.cuPointerGetAttribute, missing);
  resolve(lib, "cuGetErrorName", d.cuGetErrorName, missing);
  if (!missing.empty()) why = "libcuda.so.1 lacks " + missing;
  return d;
}

}  // namespace

const Driver* Driver::get(std::string* why) {
  static std::string failure;
  static const Driver driver = load(failure);
  if (!failure.empty()) {
    if (why) *why = failure;
    return nullptr;
  }
  return &driver;
}

std::string Driver::error_name(CUresult r) const {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != 0 || !name) name = "unknown CUDA error";
  return std::string(name) + " (" + std::to_string(r) + ")";
}

int Driver::ensure_context() const {
  if (cuInit(0) != 0) return -1;
  CUcontext current = nullptr;
  if (cuCtxGetCurrent(&current) != 0) return -1;
  if (!current) {
    CUdevice device = 0;
    if (cuDeviceGet(&device, 0) != 0 || cuDevicePrimaryCtxRetain(&current, device) != 0 ||
        cuCtxSetCurrent(current) != 0)
      return -1;
  }
  CUdevice device = -1;
  return cuCtxGetDevice(&device) == 0 ? device : -1;
}

}  // namespace kir::record
