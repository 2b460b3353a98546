"""The CUDA driver as an oracle (needs a GPU; skipped, visibly, without one).

Each image kir extracts for the device's architecture is loaded with
cuModuleLoadData; the driver's own view of every kernel (cuFuncGetParamInfo,
cuFuncGetAttribute) must match what kir decoded offline from .nv.info or PTX.
"""
from __future__ import annotations

import pytest

import kir

driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")


def check(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values


@pytest.fixture(scope="module")
def device_arch():
    try:
        err, = driver.cuInit(0)
    except Exception as error:  # no libcuda.so on this machine
        pytest.skip(f"no GPU driver: {error}")
    if err != driver.CUresult.CUDA_SUCCESS:
        pytest.skip(f"no usable GPU: cuInit returned {err}")
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        pytest.skip("no GPU present")
    device = check(driver.cuDeviceGet(0))
    major = check(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
    minor = check(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
    context = check(driver.cuDevicePrimaryCtxRetain(device))
    check(driver.cuCtxSetCurrent(context))
    yield f"sm_{major}{minor}"
    driver.cuDevicePrimaryCtxRelease(device)


def driver_params(function) -> list[tuple[int, int]]:
    params = []
    while True:
        err, offset, size = driver.cuFuncGetParamInfo(function, len(params))
        if err != driver.CUresult.CUDA_SUCCESS:
            return params
        params.append((offset, size))


def attribute(function, name: str) -> int:
    return check(driver.cuFuncGetAttribute(getattr(driver.CUfunction_attribute, name), function))


@pytest.mark.parametrize("name", ["app", "app_compress_none", "app_compress_size",
                                  "app_compress_speed", "app_rdc", "app_shared_runtime",
                                  "libkernels.so", "kernels.o"])
def test_driver_agrees_on_kernels(built, device_arch, name):
    images = [i for i in kir.open(built[name]).images
              if i.arch == device_arch and i.kind in ("cubin", "ptx")]
    if not images:
        pytest.skip(f"{name} has no image for {device_arch}")
    checked = 0
    for image in images:
        if image.container.section == "__nv_relfatbin":
            continue  # relocatable code (-rdc) must be linked before it loads
        data = image.read()
        module = check(driver.cuModuleLoadData(data))
        try:
            for kernel in image.kernels:
                function = check(driver.cuModuleGetFunction(module, kernel.name.encode()))
                assert driver_params(function) == [(p.offset, p.size) for p in kernel.params], \
                    (image, kernel.name)
                if image.kind == "cubin":
                    assert attribute(function, "CU_FUNC_ATTRIBUTE_NUM_REGS") == kernel.registers
                    assert attribute(function, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") <= \
                        kernel.shared_bytes
                if kernel.max_threads:
                    assert attribute(function, "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK") <= \
                        kernel.max_threads[0]
                checked += 1
        finally:
            driver.cuModuleUnload(module)
    assert checked > 0
