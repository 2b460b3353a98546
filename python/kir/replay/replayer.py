"""Carrying a replay plan out on a GPU with the CUDA driver API (cuda-bindings): the
recorded addresses reserved, device memory mapped there, the code loaded; `run()`
restores every prologue, launches (timing each repeat with CUDA events, or with
CUPTI's kernel activity records: kir.replay.activity) and compares device memory
with every epilogue."""
from __future__ import annotations

import ctypes
import statistics
from dataclasses import dataclass, field

from kir.errors import STICKY_CUDA_ERRORS, DeviceFaultError, NoDeviceError, OptionError, ReplayError, missing_extra
from kir.record import Record, Region
from kir.replay.comparison import Mismatch, check, tolerance_for
from kir.replay.planner import Mapping, plan


@dataclass
class RunResult:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    launch_identity: str        #: the launch identity of the variant launched (docs/hashing.md)
    variant: bool               #: grid or block differ from the recording
    times_ms: list[float]
    verified: bool | None       #: None when not verified
    mismatches: list[Mismatch]
    #: regions that differ from the recording within the tolerance (verified): by how much
    differences: list[Mismatch] = field(default_factory=list)
    # -- run(Variant) (kir.replay.variant) --
    name: str = ""              #: the variant's name
    description: str = ""       #: what the variant changes (Variant.describe)
    warmup: int = 0             #: untimed launches before the timed ones
    compiled: bool = False      #: the code was compiled by kir.jit from the record's IR
    jit_key: str | None = None  #: its JIT key (None: the recorded code)
    code_kind: str = ""         #: "cubin", "ptx" or "ir" (the code loaded)
    code_size: int | None = None  #: bytes of the code loaded
    compile_seconds: float | None = None  #: kir.jit.compile's time (None: not compiled here)
    cached: bool = False        #: the compiled code came from this Replayer's cache of keys
    resources: object = None    #: kir.jit.Resources: registers, spills, shared / local memory, ...
    timings: dict = field(default_factory=dict)  #: kir.jit.compile's seconds per step (compiled here)
    timing: str = "each"        #: how times_ms was measured (kir.replay.variant.TIMINGS)
    #: timing "activity": the CUPTI kernel records of the replayed kernel the timed launches gave,
    #: and the same launches timed between CUDA events (what timing "each" measures), ms
    kernel_records: int | None = None
    event_times_ms: list[float] | None = None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None

    @property
    def min_ms(self) -> float | None:
        return min(self.times_ms) if self.times_ms else None

    def _resource(self, name: str):
        return getattr(self.resources, name, None) if self.resources is not None else None

    @property
    def registers(self) -> int | None:
        return self._resource("registers")

    @property
    def spill_stores(self) -> int | None:
        return self._resource("spill_stores")

    @property
    def spill_loads(self) -> int | None:
        return self._resource("spill_loads")

    @property
    def shared_memory(self) -> int | None:
        """Static shared memory of the kernel (bytes)."""
        return self._resource("shared_bytes")

    @property
    def local_memory(self) -> int | None:
        return self._resource("local_bytes")

    def summary(self) -> dict:
        """JSON-ready."""
        import dataclasses
        out = {k: v for k, v in dataclasses.asdict(self).items()
               if k not in ("resources", "mismatches", "differences")}
        out["mismatches"] = [dataclasses.asdict(m) for m in self.mismatches]
        out["differences"] = [dataclasses.asdict(m) for m in self.differences]
        out["median_ms"] = self.median_ms
        if self.resources is not None:
            r = dataclasses.asdict(self.resources)
            r.pop("log", None)
            out["resources"] = r
        return out


@dataclass
class _Code:
    """A module loaded for variants: its function and where its globals are."""
    module: object
    function: object
    addresses: dict[int, int]   #: region index -> device address (allocations, and this module's globals)
    kind: str
    size: int
    compiled: object = None     #: kir.jit.CompiledKernel (None: the recorded code)
    resources: object = None


class _LaunchParameters:
    """The packed argument buffer as cuLaunchKernel's `extra` array (an address,
    0 when the kernel takes none), built once per run and kept alive with it."""

    def __init__(self, d, args: bytes) -> None:
        import ctypes
        self._buffer = ctypes.create_string_buffer(args, max(1, len(args)))
        self._size = ctypes.c_size_t(len(args))
        self._extra = (ctypes.c_void_p * 5)(d.CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self._buffer),
                                            d.CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                            d.CU_LAUNCH_PARAM_END)
        self.extra = ctypes.addressof(self._extra) if args else 0


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise missing_extra("cuda-bindings", "replay", "replaying on the GPU", error, NoDeviceError) from None
    return driver


class Replayer:
    """A recorded launch set up on a GPU: its memory mapped at the recorded addresses and
    its code loaded. `close()` (or leaving a `with` block) undoes everything."""

    def __init__(self, record: Record, code: str = "launched", device: int = 0, cache=None) -> None:
        """`cache`: a kir.cache.Cache (or its directory) the code compiled for
        variants is stored into under its JIT key (what `kir tune` hands the JIT client)."""
        self.record, self.driver = record, _driver()
        self.stage = "load"  #: what the Replayer was doing last: "load", "compile" or "launch"
        self._variant_code: dict[str, _Code] = {}  # JIT key -> compiled code loaded
        self._recorded_code: _Code | None = None
        self.cache = None
        if cache is not None:
            from kir.cache import Cache
            self.cache = cache if hasattr(cache, "store") else Cache(str(cache))
        self._undo: list = []
        self._addresses: dict[int, int] = {}  # region index -> device address
        self._prologues: dict[int, bytes] = {}
        self.absent_globals: list[str] = []  # recorded globals the loaded code does not define
        try:
            self._open_device(device)
            self.plan = plan(record, code, self.device_arch, self._granularity())
            self._map_memory()
            self._load_code()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Unload the module, unmap and free the memory, release the context (in reverse)."""
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # cleaning up after a failure: keep going
                pass

    # -- setting up --

    def _call(self, what: str, result):
        """The values of a driver call's result tuple, or a ReplayError naming the call."""
        error, *values = result
        if error != self.driver.CUresult.CUDA_SUCCESS:
            if int(error) in STICKY_CUDA_ERRORS:
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

    def _open_device(self, ordinal: int) -> None:
        d = self.driver
        try:
            error, = d.cuInit(0)
        except Exception as exc:  # cuda-bindings raises when libcuda.so is absent
            raise NoDeviceError(f"no CUDA device: {exc}") from None
        if error != d.CUresult.CUDA_SUCCESS:
            raise NoDeviceError(f"no CUDA device: cuInit: {self._error_name(error)}")
        count = self._call("cuDeviceGetCount", d.cuDeviceGetCount())
        if ordinal >= count:
            raise NoDeviceError(f"no CUDA device: device {ordinal} asked for, {count} present")
        self.device = self._call("cuDeviceGet", d.cuDeviceGet(ordinal))
        self.ordinal = ordinal
        context = self._call("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(self.device))
        self._undo.append(lambda: d.cuDevicePrimaryCtxRelease(self.device))
        self._call("cuCtxSetCurrent", d.cuCtxSetCurrent(context))
        self.device_arch = f"sm_{self._attribute('MAJOR')}{self._attribute('MINOR')}"

    def _attribute(self, which: str) -> int:
        d = self.driver
        attribute = getattr(d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{which}")
        return self._call("cuDeviceGetAttribute", d.cuDeviceGetAttribute(attribute, self.device))

    def _allocation_prop(self):
        d = self.driver
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.ordinal
        return prop

    def _granularity(self) -> int:
        d = self.driver
        flag = d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        return int(self._call("cuMemGetAllocationGranularity",
                              d.cuMemGetAllocationGranularity(self._allocation_prop(), flag)))

    def _map_memory(self) -> None:
        for address, size in self.plan.reservations:
            self._reserve(address, size)
        for mapping in self.plan.mappings:
            self._map(mapping)
            for region in mapping.regions:
                self._addresses[region.index] = region.address

    def _reserve(self, address: int, size: int) -> None:
        d = self.driver
        got = int(self._call(f"cuMemAddressReserve({size:#x} bytes at {address:#x})",
                             d.cuMemAddressReserve(size, 0, address, 0)))
        if got != address:
            d.cuMemAddressFree(got, size)
            raise ReplayError(f"cuMemAddressReserve asked for {address:#x} (+{size:#x}) and got {got:#x}: "
                              "the recorded addresses are taken in this process")
        self._undo.append(lambda: d.cuMemAddressFree(address, size))

    def _map(self, mapping: Mapping) -> None:
        d = self.driver
        where = f"{mapping.address:#x} (+{mapping.size:#x})"
        handle = self._call(f"cuMemCreate for {where}", d.cuMemCreate(mapping.size, self._allocation_prop(), 0))
        self._undo.append(lambda: d.cuMemRelease(handle))
        self._call(f"cuMemMap at {where}", d.cuMemMap(mapping.address, mapping.size, 0, handle, 0))
        self._undo.append(lambda: d.cuMemUnmap(mapping.address, mapping.size))
        access = d.CUmemAccessDesc()
        access.location = self._allocation_prop().location
        access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self._call(f"cuMemSetAccess at {where}", d.cuMemSetAccess(mapping.address, mapping.size, [access], 1))

    def _link_units(self, units: list[bytes]) -> bytes:
        """Relocatable device code: JIT-compile every unit's PTX for this device and link
        them (the driver linker, cuLinkCreate/cuLinkAddData/cuLinkComplete), as nvcc's
        device link did; the linked cubin."""
        d = self.driver
        state = self._call("cuLinkCreate", d.cuLinkCreate(0, [], []))
        try:
            for i, ptx in enumerate(units):
                text = ptx if ptx.endswith(b"\0") else ptx + b"\0"  # PTX is read as a C string
                self._call(f"cuLinkAddData (PTX unit {i})",
                           d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, text, len(text),
                                           f"unit{i}.ptx".encode(), 0, [], []))
            cubin, size = self._call("cuLinkComplete", d.cuLinkComplete(state))
            return ctypes.string_at(int(cubin), size)  # owned by the link state: copy it out
        finally:
            d.cuLinkDestroy(state)

    def _load_code(self) -> None:
        d = self.driver
        units = self.plan.code_units()
        image = self._link_units(units) if units else self.plan.code_bytes()
        if self.plan.code.kind != "cubin" and not units and not image.endswith(b"\0"):
            image += b"\0"  # the driver reads PTX as a C string
        self._loaded_image = image
        self.module = self._call(f"cuModuleLoadData ({self.plan.code.kind})", d.cuModuleLoadData(image))
        self._undo.append(lambda: d.cuModuleUnload(self.module))
        name = self.record.kernel.name
        self.function = self._call(f"cuModuleGetFunction({name})",
                                   d.cuModuleGetFunction(self.module, name.encode()))
        for region in self.plan.globals:
            address = self._global_address(region)
            if address is None:
                self.absent_globals.append(region.name)
            else:
                self._addresses[region.index] = address

    def _global_address(self, region: Region, module=None) -> int | None:
        """Where the loaded module holds the global; None when it has no such global
        (code compiled from a per-kernel IR module defines only what the kernel uses)."""
        d = self.driver
        result = d.cuModuleGetGlobal(module or self.module, region.name.encode())
        if result[0] == d.CUresult.CUDA_ERROR_NOT_FOUND:
            return None
        address, size = self._call(f"cuModuleGetGlobal({region.name})", result)
        if size != region.size:
            raise ReplayError(f"global {region.name} is {size} bytes in the loaded module, "
                              f"{region.size} in the record")
        return int(address)

    # -- running --

    def restore(self, addresses: dict[int, int] | None = None) -> None:
        """Copy every prologue (allocations and globals) into device memory: the
        mapped memory is reused, never reserved again."""
        d = self.driver
        for index, address in (self._addresses if addresses is None else addresses).items():
            data = self._prologue(index)
            self._call(f"cuMemcpyHtoD to {address:#x}", d.cuMemcpyHtoD(address, data, len(data)))
        self._call("cuCtxSynchronize", d.cuCtxSynchronize())

    def _prologue(self, index: int) -> bytes:
        if index not in self._prologues:
            self._prologues[index] = self.record.prologue(index)
        return self._prologues[index]

    def run(self, grid=None, block=None, shared_bytes=None, repeat: int = 1, verify: bool = True,
            tolerance=None, *, variant=None) -> RunResult:
        """Restore, launch and time `repeat` times (each from the prologue), then compare
        every snapshotted region with its epilogue (bitwise, or within `tolerance`: a
        Tolerance, or a dict of them by global name / allocation address).

        `run(variant)` (or `run(variant=...)`), with a kir.replay.Variant: that variant
        (run_variant); the other arguments but `verify` must then be left out."""
        from kir.replay.variant import Variant
        if isinstance(grid, Variant):
            grid, variant = None, grid
        if variant is not None:
            if not isinstance(variant, Variant):
                raise OptionError(f"variant: expected a kir.replay.Variant, not {type(variant).__name__}")
            if (grid, block, shared_bytes, repeat, tolerance) != (None, None, None, 1, None):
                raise OptionError("run(variant): the launch, repeat count and tolerance are the variant's")
            return self.run_variant(variant, verify=verify)
        if repeat < 1:
            raise OptionError(f"repeat {repeat}: must be at least 1")
        launch = self.record.launch
        grid, block = tuple(grid or launch.grid), tuple(block or launch.block)
        shared = launch.shared_bytes if shared_bytes is None else shared_bytes
        self._allow_shared(shared)
        parameters = _LaunchParameters(self.driver, self.plan.args)
        times = [self._timed_launch(grid, block, shared, parameters) for _ in range(repeat)]
        differences = self.differences(tolerance) if verify else []
        mismatches = [m for m in differences if not m.within]
        return RunResult(grid=grid, block=block, shared_bytes=shared,
                         launch_identity=self.plan.variant_launch_identity(grid, block, shared),
                         variant=(grid, block) != (launch.grid, launch.block), times_ms=times,
                         verified=(not mismatches) if verify else None, mismatches=mismatches,
                         differences=[m for m in differences if m.within])

    def _allow_shared(self, shared: int, function=None) -> None:
        if shared > 48 << 10:
            d = self.driver
            attribute = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                       d.cuFuncSetAttribute(function or self.function, attribute, shared))

    def _timed_launch(self, grid, block, shared: int, parameters: _LaunchParameters, code: _Code | None = None,
                      timed: bool = True) -> float | None:
        d = self.driver
        self.restore(code.addresses if code is not None else None)
        function = code.function if code is not None else self.function
        if not timed:
            self._call(f"cuLaunchKernel({self.record.kernel.name})",
                       d.cuLaunchKernel(function, *grid, *block, shared, 0, None, parameters.extra))
            self._call("the kernel", d.cuCtxSynchronize())
            return None
        start, end = (self._call("cuEventCreate", d.cuEventCreate(0)) for _ in range(2))
        try:
            self._call("cuEventRecord", d.cuEventRecord(start, 0))
            self._call(f"cuLaunchKernel({self.record.kernel.name})",
                       d.cuLaunchKernel(function, *grid, *block, shared, 0, None, parameters.extra))
            self._call("cuEventRecord", d.cuEventRecord(end, 0))
            self._call("the kernel", d.cuEventSynchronize(end))
            return float(self._call("cuEventElapsedTime", d.cuEventElapsedTime(start, end)))
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)

    def verify(self, tolerance=None, addresses: dict[int, int] | None = None) -> list[Mismatch]:
        """Compare device memory with every epilogue; the regions that differ (beyond
        the tolerance)."""
        return [m for m in self.differences(tolerance, addresses) if not m.within]

    def differences(self, tolerance=None, addresses: dict[int, int] | None = None) -> list[Mismatch]:
        """Every region whose bytes differ from its epilogue: outside the tolerance, or
        `within` it (with by how much)."""
        d = self.driver
        found = []
        for index, address in (self._addresses if addresses is None else addresses).items():
            region = self.record.regions[index]
            actual = bytearray(region.size)
            self._call(f"cuMemcpyDtoH from {address:#x}", d.cuMemcpyDtoH(actual, address, region.size))
            difference = check(region, bytes(actual), self.record.epilogue(region), tolerance_for(region, tolerance))
            if difference:
                found.append(difference)
        return found

    # -- variants (kir.replay.variant) --

    def run_variant(self, variant, verify: bool = True) -> RunResult:
        """Run a kir.replay.Variant: its code (compiled from the record's IR by
        kir.jit.compile when it specializes anything or sets compile options, cached
        here by JIT key and stored into `cache`; else the code this Replayer loaded),
        `variant.warmup` untimed then `variant.repeat` timed launches (`variant.timing`:
        CUDA events, a CUDA graph, or CUPTI's kernel activity records), each from the
        prologue, with the variant's grid, block and dynamic shared memory; then device
        memory against the epilogues (bitwise, or within `variant.tolerance`)."""
        from kir.replay.variant import jit_key as variant_key, resolve
        if variant.timing == "activity":
            from kir.replay.activity import cupti
            cupti()  # cupti-python missing: the install hint before anything is compiled
        self.stage = "compile"  # what a failure below was doing (kir.tune.trial's error kinds)
        resolved = resolve(self.record, variant)
        key = variant_key(self.record, resolved, self.device_arch)
        cached = key is not None and key in self._variant_code
        code = self._code_for(resolved, key)
        self.stage = "launch"
        grid, block, shared = resolved.grid, resolved.block, resolved.shared_bytes
        self._allow_shared(shared, code.function)
        parameters = _LaunchParameters(self.driver, self.plan.args)
        kernel_records = event_times = None
        if variant.timing == "graph":
            self._timed_launch(grid, block, shared, parameters, code, timed=False)
            differences = self.differences(variant.tolerance, code.addresses) if verify else []
            times = self._graph_times(code, grid, block, shared, parameters, variant.repeat, variant.warmup)
        else:
            for _ in range(variant.warmup):
                self._timed_launch(grid, block, shared, parameters, code, timed=False)
            if variant.timing == "activity":
                times, event_times, kernel_records = self._activity_times(code, grid, block, shared, parameters,
                                                                          variant.repeat)
            else:
                times = [self._timed_launch(grid, block, shared, parameters, code) for _ in range(variant.repeat)]
            differences = self.differences(variant.tolerance, code.addresses) if verify else []
        mismatches = [m for m in differences if not m.within]
        launch = self.record.launch
        compiled = code.compiled
        return RunResult(grid=grid, block=block, shared_bytes=shared,
                         launch_identity=self.plan.variant_launch_identity(grid, block, shared),
                         variant=(grid, block) != (tuple(launch.grid), tuple(launch.block)), times_ms=times,
                         verified=(not mismatches) if verify else None, mismatches=mismatches,
                         differences=[m for m in differences if m.within], name=variant.name, description=variant.describe(), warmup=variant.warmup,
                         compiled=compiled is not None, jit_key=key, code_kind=code.kind, code_size=code.size,
                         compile_seconds=compiled.compile_seconds if compiled is not None else None,
                         cached=cached, resources=code.resources,
                         timings=dict(compiled.timings) if compiled is not None else {},
                         timing=variant.timing, kernel_records=kernel_records, event_times_ms=event_times)

    def _activity_times(self, code: _Code, grid, block, shared: int, parameters: _LaunchParameters,
                        repeat: int) -> tuple[list[float], list[float], int]:
        """`repeat` launches, each from the prologue and alone, timed by the GPU's own
        start and end of the kernel in CUPTI's activity records (kir.replay.activity):
        the times (ms), the same launches' times between CUDA events (ms), and the
        number of kernel records summed."""
        from kir.replay.activity import KernelActivity
        times, events = [], []
        with KernelActivity(self.record.kernel.name) as activity:
            for _ in range(repeat):
                events.append(self._timed_launch(grid, block, shared, parameters, code))
                self._call("the kernel", self.driver.cuCtxSynchronize())  # its record complete before the flush
                times.append(activity.take()[0])
        return times, events, activity.records

    def _graph_times(self, code: _Code, grid, block, shared: int, parameters: _LaunchParameters, launches: int,
                     warmup: int) -> list[float]:
        """`launches` launches captured in one CUDA graph (stream capture), launched
        `warmup` times untimed, then GRAPH_ROUNDS times between two CUDA events: the
        mean time per launch of each round (ms)."""
        from kir.replay.variant import GRAPH_ROUNDS
        d = self.driver
        name = self.record.kernel.name
        self.restore(code.addresses)
        stream = self._call("cuStreamCreate", d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        graph = executable = None
        events = []
        try:
            mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            self._call("cuStreamBeginCapture", d.cuStreamBeginCapture(stream, mode))
            try:
                for _ in range(launches):
                    self._call(f"cuLaunchKernel({name}) in a graph",
                               d.cuLaunchKernel(code.function, *grid, *block, shared, stream, None, parameters.extra))
            finally:
                graph = self._call("cuStreamEndCapture", d.cuStreamEndCapture(stream))
            executable = self._call("cuGraphInstantiate", d.cuGraphInstantiate(graph, 0))
            for _ in range(warmup):
                self._call("cuGraphLaunch", d.cuGraphLaunch(executable, stream))
            self._call("the kernel", d.cuStreamSynchronize(stream))
            events = [self._call("cuEventCreate", d.cuEventCreate(0)) for _ in range(2)]
            times = []
            for _ in range(GRAPH_ROUNDS):
                self._call("cuEventRecord", d.cuEventRecord(events[0], stream))
                self._call("cuGraphLaunch", d.cuGraphLaunch(executable, stream))
                self._call("cuEventRecord", d.cuEventRecord(events[1], stream))
                self._call("the kernel", d.cuEventSynchronize(events[1]))
                total = float(self._call("cuEventElapsedTime", d.cuEventElapsedTime(events[0], events[1])))
                times.append(total / launches)
            return times
        finally:
            for event in events:
                d.cuEventDestroy(event)
            if executable is not None:
                d.cuGraphExecDestroy(executable)
            if graph is not None:
                d.cuGraphDestroy(graph)
            d.cuStreamDestroy(stream)

    def _code_for(self, resolved, key: str | None) -> _Code:
        if key is None:
            if self._recorded_code is None:
                self._recorded_code = _Code(self.module, self.function, dict(self._addresses),
                                            self.plan.code.kind, len(self._loaded_image),
                                            resources=self._recorded_resources())
            return self._recorded_code
        if key not in self._variant_code:
            from kir.replay.variant import compile_variant
            compiled = compile_variant(self.record, resolved, self.device_arch)
            self.stage = "load"
            self._variant_code[key] = self._load_compiled(compiled)
            if self.cache is not None:
                self.cache.store(key, compiled.code, compiled.kind, compiled.arch, compiled.meta)
        return self._variant_code[key]

    def _load_compiled(self, compiled) -> _Code:
        d = self.driver
        image = compiled.code
        if compiled.kind != "cubin" and not image.endswith(b"\0"):
            image += b"\0"
        module = self._call(f"cuModuleLoadData (kir.jit {compiled.kind})", d.cuModuleLoadData(image))
        self._undo.append(lambda: d.cuModuleUnload(module))
        name = self.record.kernel.name
        function = self._call(f"cuModuleGetFunction({name})", d.cuModuleGetFunction(module, name.encode()))
        addresses = {i: a for i, a in self._addresses.items() if not self.record.regions[i].is_global}
        for region in self.plan.globals:
            address = self._global_address(region, module)
            if address is not None:
                addresses[region.index] = address
        return _Code(module, function, addresses, compiled.kind, len(compiled.code), compiled, compiled.resources)

    def _recorded_resources(self):
        """What the recorded code uses: from the cubin when it is one (kir's parser),
        else the driver's function attributes."""
        from kir.jit.codegen import Resources, from_cubin
        resources = Resources()
        if self.plan.code.kind == "cubin":
            try:
                from_cubin(self._loaded_image, self.record.kernel.name, resources)
                return resources
            except Exception:  # not decodable: ask the driver
                pass
        d = self.driver
        attributes = d.CUfunction_attribute
        for field_name, attribute in (("registers", "CU_FUNC_ATTRIBUTE_NUM_REGS"),
                                      ("shared_bytes", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                                      ("local_bytes", "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")):
            error, value = d.cuFuncGetAttribute(getattr(attributes, attribute), self.function)
            if error == d.CUresult.CUDA_SUCCESS:
                setattr(resources, field_name, int(value))
        resources.tool = "driver"
        return resources


__all__ = ["Replayer", "RunResult"]
