"""kir.jit's AMDGPU code objects on a real AMD GPU (MI250X, MI300A, ...): loaded with
hipModuleLoadData and launched with hipModuleLaunchKernel through the ROCm runtime
(libamdhip64.so, by ctypes), the results checked. Skips without an AMD GPU (/dev/kfd
and a working hipGetDeviceCount > 0): it has not run yet (docs/jit.md, "AMD GPUs").

The signatures are HIP's (ROCm/HIP include/hip/hip_runtime_api.h, Debian's
libamdhip64-dev 5.2 and ROCm 6.x/7.x alike): hipModuleLoadData(hipModule_t*, const
void*), hipModuleGetFunction(hipFunction_t*, hipModule_t, const char*),
hipModuleLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes,
stream, void** kernelParams, void** extra), hipMemcpy(dst, src, bytes, kind) with
hipMemcpyHostToDevice = 1 and hipMemcpyDeviceToHost = 2 (include/hip/driver_types.h)."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from kir import jit


def _hip():
    import running  # tests/support
    if running.amd_gpu_count() == 0:
        return None
    for name in ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.hipGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0:
            return lib
    return None


HIP = _hip()
pytestmark = [pytest.mark.skipif(HIP is None, reason="needs an AMD GPU (/dev/kfd, libamdhip64.so, a device)"),
              pytest.mark.skipif(not shutil.which("clang-22"), reason="needs clang-22")]

SOURCE = r"""
#define __global__ __attribute__((global))
extern "C" __global__ void scale(double a, double *x, int n) {
  unsigned i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
               + __builtin_amdgcn_workitem_id_x();
  if (i < (unsigned)n) x[i] = a * x[i];
}
"""


def _check(rc: int, what: str) -> None:
    assert rc == 0, f"{what} returned hipError_t {rc}"


def _run(code: bytes, a: float, n: int, block: int) -> list[float]:
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(HIP.hipModuleLoadData(ctypes.byref(module), code), "hipModuleLoadData")
    _check(HIP.hipModuleGetFunction(ctypes.byref(function), module, b"scale"), "hipModuleGetFunction")
    host = (ctypes.c_double * n)(*[float(i) for i in range(n)])
    device = ctypes.c_void_p()
    _check(HIP.hipMalloc(ctypes.byref(device), ctypes.c_size_t(8 * n)), "hipMalloc")
    _check(HIP.hipMemcpy(device, host, ctypes.c_size_t(8 * n), 1), "hipMemcpy")
    args = [ctypes.c_double(a), ctypes.c_void_p(device.value), ctypes.c_int(n)]
    params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in args])
    grid = (n + block - 1) // block
    _check(HIP.hipModuleLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, None, params, None),
           "hipModuleLaunchKernel")
    _check(HIP.hipDeviceSynchronize(), "hipDeviceSynchronize")
    _check(HIP.hipMemcpy(host, device, ctypes.c_size_t(8 * n), 2), "hipMemcpy")
    HIP.hipFree(device)
    HIP.hipModuleUnload(module)
    return list(host)


def test_specialized_code_object_runs(tmp_path):
    """The code object kir.jit compiled (a = 2.5 folded, block 64, bounds 64) loads
    and computes 2.5 * x, whatever `a` the launch passes; the unspecialized one uses
    the launch's `a`."""
    import running  # tests/support
    arch = running.amd_gpu_arch()
    assert arch, "no gfx_target_version in the KFD topology"
    src = tmp_path / "k.hip"
    src.write_text(SOURCE)
    ir = subprocess.run(["clang-22", "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc",
                         "--cuda-device-only", "-O3", "-emit-llvm", "-S", str(src), "-o", "-"],
                        check=True, capture_output=True).stdout
    n = 1000
    plain = jit.compile(ir, "scale", arch)
    assert _run(plain.code, 3.0, n, 64) == [3.0 * i for i in range(n)]
    spec = jit.compile(ir, "scale", arch, {"args": [(1, "f64", 2.5)], "block": (64, 1, 1), "bounds": (64, 0)})
    assert _run(spec.code, 9.0, n, 64) == [2.5 * i for i in range(n)]
