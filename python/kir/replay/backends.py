"""The GPU API a Replayer drives (kir.replay.replayer), one class per vendor behind one
interface: reserving the recorded addresses and mapping device memory there (the
driver's virtual memory management), loading the recorded code, finding its
globals by name, copying, launching with a packed argument buffer, and timing a
launch between two events.

- `CudaBackend`: the CUDA driver API through cuda-bindings (the `replay` extra).
- `HipBackend`: HIP's module API through hip-python (AMD's bindings, the `hip`
  extra): hipMemAddressReserve / hipMemCreate / hipMemMap / hipMemSetAccess,
  hipModuleLoadData of the record's AMDGPU code object, hipModuleGetGlobal,
  hipModuleLaunchKernel with HIP_LAUNCH_PARAM_BUFFER_POINTER `extra`, hipEvent*.
  hip-python dlopens "libamdhip64.so" (hip/_util/posixloader.pyx, open_library)
  on its first call and resolves each entry point by name then (hip/chip.pyx,
  __init_symbol), so whichever libamdhip64.so the loader finds serves it (ROCm's,
  or tests/fixtures/hip_device_stub.c through LD_LIBRARY_PATH).

`backend_for(record, name)` picks one: "cuda", "hip", or "auto" (the record's image
kind: an AMDGPU "code-object" is HIP; a record holding no image: its device's
arch, gfx* is HIP).

Both launch code kir.jit compiled from the record's IR (`--code ir`, variants that
specialize): a cubin or PTX on CUDA, an AMDGPU code object for the device's
target-id on HIP (kir/jit/amdgpu.py), loaded as the recorded one is
(hipModuleLoadData). What only CUDA has here: relocatable PTX units linked by the
driver, CUDA graphs and CUPTI activity timing; the HIP backend says so by name when
asked for them."""
from __future__ import annotations

import ctypes

from kir.errors import STICKY_CUDA_ERRORS, DeviceFaultError, NoDeviceError, OptionError, ReplayError, missing_extra

BACKENDS = ("auto", "cuda", "hip")


def backend_name(record, name: str = "auto") -> str:
    """"cuda" or "hip": `name`, or for "auto" the vendor of the record's code."""
    if name not in BACKENDS:
        raise OptionError(f"backend {name!r}: expected one of {', '.join(BACKENDS)}")
    if name != "auto":
        return name
    image = record.kernel.image
    if image is not None:
        return "hip" if image.kind == "code-object" else "cuda"
    return "hip" if record.device.arch.startswith("gfx") else "cuda"


def planned_arch(record, name: str = "auto") -> str:
    """The device a plan is made for when none is named (`kir replay --plan`): sm_90
    for CUDA, the recorded code object's target for HIP."""
    if backend_name(record, name) == "cuda":
        return "sm_90"
    return record.kernel.image.arch if record.kernel.image is not None else record.device.arch


def backend_for(record, name: str, undo: list) -> Backend:
    """The backend `name` ("auto": backend_name) with its module imported; cleanups
    it registers go onto `undo` (run in reverse by the Replayer's close)."""
    return {"cuda": CudaBackend, "hip": HipBackend}[backend_name(record, name)](undo)


class Backend:
    """What a Replayer needs of a GPU API. Every method raises ReplayError (or
    DeviceFaultError / NoDeviceError) naming the call that failed."""

    name = ""
    jit = False            #: launches code kir.jit compiles (variants that compile)
    timings = ("each",)    #: the kir.replay.variant timings it measures

    def __init__(self, undo: list) -> None:
        self.undo = undo

    def open(self, ordinal: int) -> str: ...               # the device's arch ("sm_90", "gfx942:sramecc+:xnack-")
    def granularity(self) -> int: ...
    def reserve(self, address: int, size: int) -> None: ...
    def map(self, address: int, size: int) -> None: ...
    def image(self, plan) -> bytes: ...                    # the code to load, from the plan
    def load(self, image: bytes, what: str): ...           # a module
    def function(self, module, name: str): ...
    def global_address(self, module, name: str) -> tuple[int, int] | None: ...  # (address, size); None: absent
    def copy_to(self, address: int, data: bytes) -> None: ...
    def copy_from(self, address: int, size: int) -> bytes: ...
    def synchronize(self, what: str) -> None: ...
    def parameters(self, args: bytes): ...                 # the launch's argument holder
    def launch(self, function, grid, block, shared: int, parameters, name: str, stream=None) -> None: ...
    def timed_launch(self, function, grid, block, shared: int, parameters, name: str) -> float: ...
    def allow_shared(self, function, shared: int) -> None: ...
    def resources(self, function, resources) -> None: ...  # fill kir.jit.Resources from the API


# --- CUDA ---------------------------------------------------------------------------------

class _LaunchParameters:
    """The packed argument buffer as the launch's `extra` array (an address, 0 when the
    kernel takes none), built once per run and kept alive with it: cuLaunchKernel's
    CU_LAUNCH_PARAM_* and hipModuleLaunchKernel's HIP_LAUNCH_PARAM_* (hip_runtime_api.h:
    BUFFER_POINTER 0x01, BUFFER_SIZE 0x02, END 0x03) have the same shape."""

    def __init__(self, pointer: int, size: int, end: int, args: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(args, max(1, len(args)))
        self._size = ctypes.c_size_t(len(args))
        self._extra = (ctypes.c_void_p * 5)(pointer, ctypes.addressof(self._buffer), size,
                                            ctypes.addressof(self._size), end)
        self.extra = ctypes.addressof(self._extra) if args else 0


#: ordinal -> (CUdevice, its primary context), retained once per process and kept: creating
#: the context took 117 ms of each record's 200 ms in `kir replay --all` on the H200 and
#: destroying it 71 ms more (issue 28; benchmarks/replay_all_profile.py), when every
#: replay retained it and released it at the end. What a replay makes in it (the VA
#: range, memory, modules) is still undone by the replay; a sticky fault forgets it.
_RETAINED: dict[int, tuple] = {}


def forget_context(ordinal: int | None) -> None:
    """Release this process's retained primary context of device `ordinal` (after a
    device fault: the next replay retains it again)."""
    if ordinal in _RETAINED:
        device, _ = _RETAINED.pop(ordinal)
        cuda_driver().cuDevicePrimaryCtxRelease(device)


def cuda_driver():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise missing_extra("cuda-bindings", "replay", "replaying on the GPU", error, NoDeviceError) from None
    return driver


class CudaBackend(Backend):
    name = "cuda"
    jit = True
    timings = ("each", "graph", "activity")

    def __init__(self, undo: list) -> None:
        super().__init__(undo)
        self.driver = cuda_driver()

    def call(self, what: str, result):
        """The values of a driver call's result tuple, or a ReplayError naming the call."""
        error, *values = result
        if error != self.driver.CUresult.CUDA_SUCCESS:
            if int(error) in STICKY_CUDA_ERRORS:
                forget_context(getattr(self, "ordinal", None))  # dead: the next open retains it afresh
                raise DeviceFaultError(f"{what}: {self._error_name(error)}", int(error))
            raise ReplayError(f"{what}: {self._error_name(error)}")
        return values[0] if len(values) == 1 else (values or None)

    def _error_name(self, error) -> str:
        try:
            name = self.driver.cuGetErrorName(error)[1]
            text = self.driver.cuGetErrorString(error)[1]
            return f"{name.decode()} ({text.decode()})"
        except Exception:
            return str(error)

    def open(self, ordinal: int) -> str:
        d = self.driver
        try:
            error, = d.cuInit(0)
        except Exception as exc:  # cuda-bindings raises when libcuda.so is absent
            raise NoDeviceError(f"no CUDA device: {exc}") from None
        if error != d.CUresult.CUDA_SUCCESS:
            raise NoDeviceError(f"no CUDA device: cuInit: {self._error_name(error)}")
        count = self.call("cuDeviceGetCount", d.cuDeviceGetCount())
        if ordinal >= count:
            raise NoDeviceError(f"no CUDA device: device {ordinal} asked for, {count} present")
        self.ordinal = ordinal
        if ordinal not in _RETAINED:  # once per process: the next record's replay finds it ready
            device = self.call("cuDeviceGet", d.cuDeviceGet(ordinal))
            _RETAINED[ordinal] = (device, self.call("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(device)))
        self.device, context = _RETAINED[ordinal]
        self.call("cuCtxSetCurrent", d.cuCtxSetCurrent(context))
        return f"sm_{self._attribute('MAJOR')}{self._attribute('MINOR')}"

    def _attribute(self, which: str) -> int:
        d = self.driver
        attribute = getattr(d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{which}")
        return self.call("cuDeviceGetAttribute", d.cuDeviceGetAttribute(attribute, self.device))

    def _allocation_prop(self):
        d = self.driver
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.ordinal
        return prop

    def granularity(self) -> int:
        d = self.driver
        flag = d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        return int(self.call("cuMemGetAllocationGranularity",
                             d.cuMemGetAllocationGranularity(self._allocation_prop(), flag)))

    def reserve(self, address: int, size: int) -> None:
        d = self.driver
        got = int(self.call(f"cuMemAddressReserve({size:#x} bytes at {address:#x})",
                            d.cuMemAddressReserve(size, 0, address, 0)))
        if got != address:
            d.cuMemAddressFree(got, size)
            raise ReplayError(f"cuMemAddressReserve asked for {address:#x} (+{size:#x}) and got {got:#x}: "
                              "the recorded addresses are taken in this process")
        self.undo.append(lambda: d.cuMemAddressFree(address, size))

    def map(self, address: int, size: int) -> None:
        d = self.driver
        where = f"{address:#x} (+{size:#x})"
        handle = self.call(f"cuMemCreate for {where}", d.cuMemCreate(size, self._allocation_prop(), 0))
        self.undo.append(lambda: d.cuMemRelease(handle))
        self.call(f"cuMemMap at {where}", d.cuMemMap(address, size, 0, handle, 0))
        self.undo.append(lambda: d.cuMemUnmap(address, size))
        access = d.CUmemAccessDesc()
        access.location = self._allocation_prop().location
        access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.call(f"cuMemSetAccess at {where}", d.cuMemSetAccess(address, size, [access], 1))

    def _link_units(self, units: list[bytes]) -> bytes:
        """Relocatable device code: JIT-compile every unit's PTX for this device and link
        them (the driver linker, cuLinkCreate/cuLinkAddData/cuLinkComplete), as nvcc's
        device link did; the linked cubin."""
        d = self.driver
        state = self.call("cuLinkCreate", d.cuLinkCreate(0, [], []))
        try:
            for i, ptx in enumerate(units):
                text = ptx if ptx.endswith(b"\0") else ptx + b"\0"  # PTX is read as a C string
                self.call(f"cuLinkAddData (PTX unit {i})",
                          d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, text, len(text),
                                          f"unit{i}.ptx".encode(), 0, [], []))
            cubin, size = self.call("cuLinkComplete", d.cuLinkComplete(state))
            return ctypes.string_at(int(cubin), size)  # owned by the link state: copy it out
        finally:
            d.cuLinkDestroy(state)

    def image(self, plan) -> bytes:
        units = plan.code_units()
        image = self._link_units(units) if units else plan.code_bytes()
        if plan.code.kind != "cubin" and not units and not image.endswith(b"\0"):
            image += b"\0"  # the driver reads PTX as a C string
        return image

    def load(self, image: bytes, what: str):
        d = self.driver
        module = self.call(f"cuModuleLoadData ({what})", d.cuModuleLoadData(image))
        self.undo.append(lambda: d.cuModuleUnload(module))
        return module

    def function(self, module, name: str):
        return self.call(f"cuModuleGetFunction({name})", self.driver.cuModuleGetFunction(module, name.encode()))

    def global_address(self, module, name: str) -> tuple[int, int] | None:
        d = self.driver
        result = d.cuModuleGetGlobal(module, name.encode())
        if result[0] == d.CUresult.CUDA_ERROR_NOT_FOUND:
            return None
        address, size = self.call(f"cuModuleGetGlobal({name})", result)
        return int(address), int(size)

    def copy_to(self, address: int, data: bytes) -> None:
        self.call(f"cuMemcpyHtoD to {address:#x}", self.driver.cuMemcpyHtoD(address, data, len(data)))

    def copy_from(self, address: int, size: int) -> bytes:
        actual = bytearray(size)
        self.call(f"cuMemcpyDtoH from {address:#x}", self.driver.cuMemcpyDtoH(actual, address, size))
        return bytes(actual)

    def synchronize(self, what: str) -> None:
        self.call(what, self.driver.cuCtxSynchronize())

    def parameters(self, args: bytes) -> _LaunchParameters:
        d = self.driver
        return _LaunchParameters(d.CU_LAUNCH_PARAM_BUFFER_POINTER, d.CU_LAUNCH_PARAM_BUFFER_SIZE,
                                 d.CU_LAUNCH_PARAM_END, args)

    def launch(self, function, grid, block, shared: int, parameters, name: str, stream=None) -> None:
        self.call(f"cuLaunchKernel({name})", self.driver.cuLaunchKernel(function, *grid, *block, shared,
                                                                        stream or 0, None, parameters.extra))

    def timed_launch(self, function, grid, block, shared: int, parameters, name: str) -> float:
        d = self.driver
        start, end = (self.call("cuEventCreate", d.cuEventCreate(0)) for _ in range(2))
        try:
            self.call("cuEventRecord", d.cuEventRecord(start, 0))
            self.launch(function, grid, block, shared, parameters, name)
            self.call("cuEventRecord", d.cuEventRecord(end, 0))
            self.call("the kernel", d.cuEventSynchronize(end))
            return float(self.call("cuEventElapsedTime", d.cuEventElapsedTime(start, end)))
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)

    def allow_shared(self, function, shared: int) -> None:
        if shared > 48 << 10:
            d = self.driver
            attribute = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                      d.cuFuncSetAttribute(function, attribute, shared))

    def resources(self, function, resources) -> None:
        d = self.driver
        attributes = d.CUfunction_attribute
        for field_name, attribute in (("registers", "CU_FUNC_ATTRIBUTE_NUM_REGS"),
                                      ("shared_bytes", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                                      ("local_bytes", "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")):
            error, value = d.cuFuncGetAttribute(getattr(attributes, attribute), function)
            if error == d.CUresult.CUDA_SUCCESS:
                setattr(resources, field_name, int(value))
        resources.tool = "driver"


# --- HIP ----------------------------------------------------------------------------------

def hip_module():
    try:
        from hip import hip
    except ImportError as error:
        raise missing_extra("hip-python", "hip", "replaying on an AMD GPU", error, NoDeviceError) from None
    return hip


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HipBackend(Backend):
    """HIP through hip-python; each call below is the function of the same name in
    ROCm's include/hip/hip_runtime_api.h (checked against ROCm 5.2's and 6.x's)."""

    name = "hip"
    jit = True  # kir.jit compiles AMDGPU code objects for the device's target-id (gcnArchName)

    def __init__(self, undo: list) -> None:
        super().__init__(undo)
        self.hip = hip_module()

    def call(self, what: str, result):
        """The values of a hip-python call's result tuple, or a ReplayError naming the call."""
        error, *values = result
        if int(error) != 0:  # hipSuccess
            raise ReplayError(f"{what}: {self._error_name(error)}")
        return values[0] if len(values) == 1 else (values or None)

    def _error_name(self, error) -> str:
        try:  # hip-python answers (hipSuccess, the C string)
            name, text = self.hip.hipGetErrorName(error)[-1], self.hip.hipGetErrorString(error)[-1]
            return f"{_text(name)} ({_text(text)})"
        except Exception:
            return str(error)

    def open(self, ordinal: int) -> str:
        h = self.hip
        try:
            error, = h.hipInit(0)
        except Exception as exc:  # hip-python raises RuntimeError when libamdhip64.so cannot be opened
            raise NoDeviceError(f"no HIP device: {exc}") from None
        if int(error) != 0:
            raise NoDeviceError(f"no HIP device: hipInit: {self._error_name(error)}")
        count = self.call("hipGetDeviceCount", h.hipGetDeviceCount())
        if ordinal >= count:
            raise NoDeviceError(f"no HIP device: device {ordinal} asked for, {count} present")
        self.ordinal = ordinal
        self.call(f"hipSetDevice({ordinal})", h.hipSetDevice(ordinal))
        properties = h.hipDeviceProp_t()
        self.call("hipGetDeviceProperties", h.hipGetDeviceProperties(properties, ordinal))
        return _text(properties.gcnArchName).rstrip("\0")

    def _allocation_prop(self):
        h = self.hip
        prop = h.hipMemAllocationProp()
        prop.type = h.hipMemAllocationType.hipMemAllocationTypePinned
        prop.location.type = h.hipMemLocationType.hipMemLocationTypeDevice
        prop.location.id = self.ordinal
        return prop

    def granularity(self) -> int:
        h = self.hip
        option = h.hipMemAllocationGranularity_flags.hipMemAllocationGranularityMinimum
        return int(self.call("hipMemGetAllocationGranularity",
                             h.hipMemGetAllocationGranularity(self._allocation_prop(), option)))

    def reserve(self, address: int, size: int) -> None:
        h = self.hip
        got = int(self.call(f"hipMemAddressReserve({size:#x} bytes at {address:#x})",
                            h.hipMemAddressReserve(size, 0, address, 0)))
        if got != address:
            h.hipMemAddressFree(got, size)
            raise ReplayError(f"hipMemAddressReserve asked for {address:#x} (+{size:#x}) and got {got:#x}: "
                              "the recorded addresses are taken in this process")
        self.undo.append(lambda: h.hipMemAddressFree(address, size))

    def map(self, address: int, size: int) -> None:
        h = self.hip
        where = f"{address:#x} (+{size:#x})"
        handle = self.call(f"hipMemCreate for {where}", h.hipMemCreate(size, self._allocation_prop(), 0))
        self.undo.append(lambda: h.hipMemRelease(handle))
        self.call(f"hipMemMap at {where}", h.hipMemMap(address, size, 0, handle, 0))
        self.undo.append(lambda: h.hipMemUnmap(address, size))
        access = h.hipMemAccessDesc()
        access.location.type = h.hipMemLocationType.hipMemLocationTypeDevice
        access.location.id = self.ordinal
        access.flags = h.hipMemAccessFlags.hipMemAccessFlagsProtReadWrite
        self.call(f"hipMemSetAccess at {where}", h.hipMemSetAccess(address, size, access, 1))

    def image(self, plan) -> bytes:
        return plan.code_bytes()

    def load(self, image: bytes, what: str):
        h = self.hip
        module = self.call(f"hipModuleLoadData ({what})", h.hipModuleLoadData(image))
        self.undo.append(lambda: h.hipModuleUnload(module))
        return module

    def function(self, module, name: str):
        return self.call(f"hipModuleGetFunction({name})", self.hip.hipModuleGetFunction(module, name.encode()))

    def global_address(self, module, name: str) -> tuple[int, int] | None:
        h = self.hip
        result = h.hipModuleGetGlobal(module, name.encode())
        if int(result[0]) == int(h.hipError_t.hipErrorNotFound):
            return None
        address, size = self.call(f"hipModuleGetGlobal({name})", result)
        return int(address), int(size)

    def copy_to(self, address: int, data: bytes) -> None:
        buffer = ctypes.create_string_buffer(data, max(1, len(data)))
        self.call(f"hipMemcpyHtoD to {address:#x}", self.hip.hipMemcpyHtoD(address, buffer, len(data)))

    def copy_from(self, address: int, size: int) -> bytes:
        buffer = ctypes.create_string_buffer(max(1, size))
        self.call(f"hipMemcpyDtoH from {address:#x}", self.hip.hipMemcpyDtoH(buffer, address, size))
        return buffer.raw[:size]

    def synchronize(self, what: str) -> None:
        self.call(what, self.hip.hipDeviceSynchronize())

    def parameters(self, args: bytes) -> _LaunchParameters:
        return _LaunchParameters(0x01, 0x02, 0x03, args)  # HIP_LAUNCH_PARAM_BUFFER_POINTER, _SIZE, _END

    def launch(self, function, grid, block, shared: int, parameters, name: str, stream=None) -> None:
        self.call(f"hipModuleLaunchKernel({name})",
                  self.hip.hipModuleLaunchKernel(function, *grid, *block, shared, stream, None,
                                                 parameters.extra or None))

    def timed_launch(self, function, grid, block, shared: int, parameters, name: str) -> float:
        h = self.hip
        start, end = (self.call("hipEventCreate", h.hipEventCreate()) for _ in range(2))
        try:
            self.call("hipEventRecord", h.hipEventRecord(start, None))
            self.launch(function, grid, block, shared, parameters, name)
            self.call("hipEventRecord", h.hipEventRecord(end, None))
            self.call("the kernel", h.hipEventSynchronize(end))
            return float(self.call("hipEventElapsedTime", h.hipEventElapsedTime(start, end)))
        finally:
            h.hipEventDestroy(start)
            h.hipEventDestroy(end)

    def allow_shared(self, function, shared: int) -> None:
        """AMD GPUs give a kernel its whole LDS (64 KiB on gfx9) without an opt-in:
        there is no attribute to raise (hipFuncSetAttribute takes a host function)."""

    def resources(self, function, resources) -> None:
        resources.tool = "hip"


__all__ = ["BACKENDS", "Backend", "CudaBackend", "HipBackend", "backend_for", "backend_name", "cuda_driver", "hip_module", "planned_arch"]
