"""Carrying a replay plan out on a GPU: the recorded addresses reserved, device memory
mapped there, the code loaded; `run()` restores every prologue, launches (timing each
repeat with events, or on CUDA with CUPTI's kernel activity records:
kir.replay.activity) and compares device memory with every epilogue. The GPU API is a
backend (kir.replay.backends): the CUDA driver API through cuda-bindings, or HIP
through hip-python; `Replayer(record, backend="auto")` picks the record's."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from kir.errors import OptionError, ReplayError
from kir.record import Record, Region
from kir.replay.backends import backend_for, cuda_driver
from kir.replay.comparison import Mismatch, check, tolerance_for
from kir.replay.planner import Mapping, plan


@dataclass
class RunResult:
    """What `Replayer.run` measured and verified of one launch configuration."""
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
        """The median of `times_ms` (None when nothing was timed)."""
        return statistics.median(self.times_ms) if self.times_ms else None

    @property
    def min_ms(self) -> float | None:
        """The fastest of `times_ms` (None when nothing was timed)."""
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


def _driver():
    """cuda-bindings' driver module, or NoDeviceError naming the replay extra."""
    return cuda_driver()


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


class Replayer:
    """A recorded launch set up on a GPU: its memory mapped at the recorded addresses and
    its code loaded. `close()` (or leaving a `with` block) undoes everything."""

    def __init__(self, record: Record, code: str = "launched", device: int = 0, cache=None,
                 backend: str = "auto") -> None:
        """`cache`: a kir.cache.Cache (or its directory) the code compiled for
        variants is stored into under its JIT key (what `kir tune` hands the JIT client).
        `backend`: "cuda", "hip", or "auto" (the record's: an AMDGPU code object is
        HIP; kir.replay.backends)."""
        self.record = record
        self.stage = "load"  #: what the Replayer was doing last: "load", "compile" or "launch"
        self._variant_code: dict[str, _Code] = {}  # JIT key -> compiled code loaded
        self._recorded_code: _Code | None = None
        self.cache = None
        if cache is not None:
            from kir.cache import Cache
            self.cache = cache if hasattr(cache, "store") else Cache(str(cache))
        self._undo: list = []
        self.backend = backend_for(record, backend, self._undo)
        self.driver = getattr(self.backend, "driver", None)  # cuda-bindings' driver module (CUDA)
        self._addresses: dict[int, int] = {}  # region index -> device address
        self._prologues: dict[int, bytes] = {}
        self.absent_globals: list[str] = []  # recorded globals the loaded code does not define
        try:
            self._open_device(device)
            self.plan = plan(record, code, self.device_arch, self.backend.granularity())
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

    def _open_device(self, ordinal: int) -> None:
        self.device_arch = self.backend.open(ordinal)
        self.ordinal = ordinal

    def _map_memory(self) -> None:
        for address, size in self.plan.reservations:
            self._reserve(address, size)
        for mapping in self.plan.mappings:
            self._map(mapping)
            for region in mapping.regions:
                self._addresses[region.index] = region.address

    def _reserve(self, address: int, size: int) -> None:
        self.backend.reserve(address, size)

    def _map(self, mapping: Mapping) -> None:
        self.backend.map(mapping.address, mapping.size)

    def _load_code(self) -> None:
        image = self.backend.image(self.plan)
        self._loaded_image = image
        self.module = self.backend.load(image, self.plan.code.kind)
        self.function = self.backend.function(self.module, self.record.kernel.name)
        for region in self.plan.globals:
            address = self._global_address(region)
            if address is None:
                self.absent_globals.append(region.name)
            else:
                self._addresses[region.index] = address

    def _global_address(self, region: Region, module=None) -> int | None:
        """Where the loaded module holds the global; None when it has no such global
        (code compiled from a per-kernel IR module defines only what the kernel uses)."""
        found = self.backend.global_address(module or self.module, region.name)
        if found is None:
            return None
        address, size = found
        if size != region.size:
            raise ReplayError(f"global {region.name} is {size} bytes in the loaded module, "
                              f"{region.size} in the record")
        return int(address)

    # -- running --

    def restore(self, addresses: dict[int, int] | None = None) -> None:
        """Copy every prologue (allocations and globals) into device memory: the
        mapped memory is reused, never reserved again."""
        for index, address in (self._addresses if addresses is None else addresses).items():
            self.backend.copy_to(address, self._prologue(index))
        self.backend.synchronize("cuCtxSynchronize" if self.backend.name == "cuda" else "hipDeviceSynchronize")

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
        parameters = self.backend.parameters(self.plan.args)
        times = [self._timed_launch(grid, block, shared, parameters) for _ in range(repeat)]
        differences = self.differences(tolerance) if verify else []
        mismatches = [m for m in differences if not m.within]
        return RunResult(grid=grid, block=block, shared_bytes=shared,
                         launch_identity=self.plan.variant_launch_identity(grid, block, shared),
                         variant=(grid, block) != (launch.grid, launch.block), times_ms=times,
                         verified=(not mismatches) if verify else None, mismatches=mismatches,
                         differences=[m for m in differences if m.within])

    def _allow_shared(self, shared: int, function=None) -> None:
        self.backend.allow_shared(function or self.function, shared)

    def _timed_launch(self, grid, block, shared: int, parameters, code: _Code | None = None,
                      timed: bool = True) -> float | None:
        self.restore(code.addresses if code is not None else None)
        function = code.function if code is not None else self.function
        name = self.record.kernel.name
        if not timed:
            self.backend.launch(function, grid, block, shared, parameters, name)
            self.backend.synchronize("the kernel")
            return None
        return self.backend.timed_launch(function, grid, block, shared, parameters, name)

    def verify(self, tolerance=None, addresses: dict[int, int] | None = None) -> list[Mismatch]:
        """Compare device memory with every epilogue; the regions that differ (beyond
        the tolerance)."""
        return [m for m in self.differences(tolerance, addresses) if not m.within]

    def differences(self, tolerance=None, addresses: dict[int, int] | None = None) -> list[Mismatch]:
        """Every region whose bytes differ from its epilogue: outside the tolerance, or
        `within` it (with by how much)."""
        found = []
        for index, address in (self._addresses if addresses is None else addresses).items():
            region = self.record.regions[index]
            actual = self.backend.copy_from(address, region.size)
            difference = check(region, actual, self.record.epilogue(region), tolerance_for(region, tolerance))
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
        if variant.timing not in self.backend.timings:
            raise OptionError(f"timing {variant.timing!r}: not available on {self.backend.name.upper()} "
                              f"(this backend measures {', '.join(self.backend.timings)})")
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
        parameters = self.backend.parameters(self.plan.args)
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

    def _activity_times(self, code: _Code, grid, block, shared: int, parameters,
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
                self.backend.synchronize("the kernel")  # its record complete before the flush
                times.append(activity.take()[0])
        return times, events, activity.records

    def _graph_times(self, code: _Code, grid, block, shared: int, parameters, launches: int,
                     warmup: int) -> list[float]:
        """`launches` launches captured in one CUDA graph (stream capture), launched
        `warmup` times untimed, then GRAPH_ROUNDS times between two CUDA events: the
        mean time per launch of each round (ms)."""
        from kir.replay.variant import GRAPH_ROUNDS
        d = self.driver
        name = self.record.kernel.name
        self.restore(code.addresses)
        stream = self.backend.call("cuStreamCreate", d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        graph = executable = None
        events = []
        try:
            mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            self.backend.call("cuStreamBeginCapture", d.cuStreamBeginCapture(stream, mode))
            try:
                for _ in range(launches):
                    self.backend.call(f"cuLaunchKernel({name}) in a graph",
                               d.cuLaunchKernel(code.function, *grid, *block, shared, stream, None, parameters.extra))
            finally:
                graph = self.backend.call("cuStreamEndCapture", d.cuStreamEndCapture(stream))
            executable = self.backend.call("cuGraphInstantiate", d.cuGraphInstantiate(graph, 0))
            for _ in range(warmup):
                self.backend.call("cuGraphLaunch", d.cuGraphLaunch(executable, stream))
            self.backend.call("the kernel", d.cuStreamSynchronize(stream))
            events = [self.backend.call("cuEventCreate", d.cuEventCreate(0)) for _ in range(2)]
            times = []
            for _ in range(GRAPH_ROUNDS):
                self.backend.call("cuEventRecord", d.cuEventRecord(events[0], stream))
                self.backend.call("cuGraphLaunch", d.cuGraphLaunch(executable, stream))
                self.backend.call("cuEventRecord", d.cuEventRecord(events[1], stream))
                self.backend.call("the kernel", d.cuEventSynchronize(events[1]))
                total = float(self.backend.call("cuEventElapsedTime", d.cuEventElapsedTime(events[0], events[1])))
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
            if not self.backend.jit:
                raise ReplayError(f"the variant is compiled by kir.jit, which does not target "
                                  f"{self.backend.name.upper()} devices ({self.device_arch}) yet: "
                                  "only variants of the launch configuration run the recorded code object")
            from kir.replay.variant import compile_variant
            compiled = compile_variant(self.record, resolved, self.device_arch)
            self.stage = "load"
            self._variant_code[key] = self._load_compiled(compiled)
            if self.cache is not None:
                self.cache.store(key, compiled.code, compiled.kind, compiled.arch, compiled.meta)
        return self._variant_code[key]

    def _load_compiled(self, compiled) -> _Code:
        image = compiled.code
        if compiled.kind == "ptx" and not image.endswith(b"\0"):  # the driver reads PTX as a C string
            image += b"\0"
        module = self.backend.load(image, f"kir.jit {compiled.kind}")
        function = self.backend.function(module, self.record.kernel.name)
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
        self.backend.resources(self.function, resources)
        return resources


__all__ = ["Replayer", "RunResult"]
