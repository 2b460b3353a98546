"""Replaying a recorded launch (docs/record-format.md): plan it, then run it.

`plan(record)` needs no GPU. It decides what a replay does and checks what can be
checked on the CPU: the address range to reserve, the memory to map there
(allocations, rounded out to the mapping granularity and merged when they share
a granule), the globals to restore by name, the code to load and why, the packed
parameter buffer, and the kernel hashes recomputed from the record's own bytes
(a mismatch is reported in `plan.notes`, never ignored). Code from LLVM IR is
compiled to PTX here, with llvmlite, linking libdevice when the module calls it.

`Replayer(record)` carries the plan out with the CUDA driver API (cuda-bindings):
it reserves the recorded addresses, maps device memory, loads the code, and
`run()` restores every prologue, launches (timing each repeat with CUDA events)
and compares device memory with every epilogue::

    from kir.record import Record
    from kir.replay import Replayer, plan
    record = Record.load("kir-records/records/<static>.<dynamic>.kirrec")
    print(plan(record).describe())
    with Replayer(record, code="cubin") as replayer:
        result = replayer.run(repeat=10)
        print(result.median_ms, result.verified, result.mismatches)
"""
from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kir import _core
from kir.errors import KirError
from kir.record import Record, Region, VaRange

CODE_KINDS = ("cubin", "ptx", "ir")
NORMS = ("l1", "l2", "linf")
DTYPES = ("float32", "float64")
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
RESERVE_ALIGNMENT = 32 << 20  #: see _reservations


class PlanError(KirError):
    """The record cannot be replayed as asked (no such code, wrong architecture, ...)."""


class ReplayError(KirError):
    """The driver refused a step of the replay: the message names the call and its error."""


class NoDeviceError(ReplayError):
    """No CUDA driver or device to replay on."""


# --- the plan -------------------------------------------------------------------------

@dataclass
class Mapping:
    """Device memory mapped at a recorded address: whole granules covering `regions`."""
    address: int
    size: int
    regions: list[Region]
    exact: bool             #: outside the VA range: reserved on its own, at this address


@dataclass
class CodeChoice:
    kind: str               #: "cubin", "ptx" or "ir"
    arch: str               #: the code's architecture ("sm_90"), or the one IR is compiled for
    reason: str             #: why this code, in words
    libdevice: Path | None = None  #: IR: the libdevice linked in (the module calls __nv_*)


@dataclass
class Hashes:
    recorded_static: str
    recorded_dynamic: str
    static: str             #: recomputed from the record's image
    dynamic: str            #: recomputed from the recorded static hash, arguments, grid and block

    @property
    def match(self) -> bool:
        return self.static == self.recorded_static and self.dynamic == self.recorded_dynamic


@dataclass
class ReplayPlan:
    record: Record
    device_arch: str
    granularity: int
    code: CodeChoice
    va_range: VaRange | None        #: the recorded range (None: the recorder fell back)
    reservations: list[tuple[int, int]]  #: (address, size) windows to reserve at those addresses
    mappings: list[Mapping]
    globals: list[Region]           #: restored by name in the loaded module
    skipped: list[tuple[Region, str]]  #: allocations not mapped, and why
    args: bytes                     #: the parameter buffer, each argument at its offset
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    hashes: Hashes
    notes: list[str] = field(default_factory=list)  #: what may make the replay unfaithful
    _code_bytes: bytes | None = field(default=None, repr=False)

    @property
    def hashes_match(self) -> bool:
        return self.hashes.match

    @property
    def exact(self) -> list[Mapping]:
        """Mappings outside the VA range, each reserved at its own address."""
        return [m for m in self.mappings if m.exact]

    def code_bytes(self) -> bytes:
        """The code to load: the recorded image or PTX, or PTX compiled from the IR (once)."""
        if self._code_bytes is None:
            self._code_bytes = _load_code(self.record, self.code)
        return self._code_bytes

    def variant_dynamic_hash(self, grid, block) -> _core.Hash128:
        """The dynamic hash a JIT would key this launch's code by, at another grid and block."""
        return dynamic_hash(self.record, tuple(grid), tuple(block))

    def describe(self) -> str:
        """The plan as text, one step a line."""
        return "\n".join(_describe(self))

    def to_json(self) -> dict:
        return _plan_json(self)


def plan(record: Record, code: str = "cubin", device_arch: str = "sm_90",
         granularity: int = 2 << 20, reserve_alignment: int = RESERVE_ALIGNMENT) -> ReplayPlan:
    """What replaying `record` on a `device_arch` GPU does (see the module's docstring):
    memory is mapped in `granularity` units inside reservations aligned to `reserve_alignment`."""
    if code not in CODE_KINDS:
        raise PlanError(f"unknown code kind {code!r}: expected one of {', '.join(CODE_KINDS)}")
    for name, value in (("granularity", granularity), ("reserve_alignment", reserve_alignment)):
        if value <= 0 or value & (value - 1):
            raise PlanError(f"{name} {value} is not a power of two")
    if record.kernel.image is None:
        raise PlanError(f"{record.path}: the record holds no device image (flag no-layout): "
                        "its hashes and argument layout cannot be checked")
    launch = record.launch
    mappings, skipped = _mappings(record, granularity)
    result = ReplayPlan(
        record=record, device_arch=device_arch, granularity=granularity,
        code=_choose_code(record, code, device_arch), va_range=record.va_range,
        reservations=_reservations(record.va_range, mappings, max(granularity, reserve_alignment)),
        mappings=mappings,
        globals=[g for g in record.globals if g.snapshotted], skipped=skipped,
        args=pack_args(record), grid=launch.grid, block=launch.block, shared_bytes=launch.shared_bytes,
        hashes=recompute_hashes(record))
    result.notes = _notes(result)
    return result


def pack_args(record: Record) -> bytes:
    """The parameter buffer: each recorded argument at its parameter's offset."""
    params, args = record.kernel.params, record.launch.args
    if params and not args:
        raise PlanError(f"{record.path}: the record holds no argument bytes for {len(params)} parameters")
    buffer = bytearray(max((p.offset + p.size for p in params), default=0))
    for i, (param, arg) in enumerate(zip(params, args)):
        if len(arg) != param.size:
            raise PlanError(f"{record.path}: argument {i + 1} is {len(arg)} bytes, "
                            f"the parameter is {param.size} (offset {param.offset})")
        buffer[param.offset:param.offset + param.size] = arg
    return bytes(buffer)


def recompute_hashes(record: Record) -> Hashes:
    """The static hash from the record's image bytes, and the dynamic hash from the
    recorded static hash (so each is checked on its own), the arguments, grid and block."""
    image = record.kernel.image
    static = _core.static_hash(record.kernel.name, image.kind, [record.code("image")])
    return Hashes(recorded_static=record.kernel.static_hash, recorded_dynamic=record.launch.dynamic_hash,
                  static=str(static), dynamic=str(dynamic_hash(record, record.launch.grid, record.launch.block)))


def dynamic_hash(record: Record, grid, block) -> _core.Hash128:
    """The dynamic hash of the recorded launch at this grid and block (the hook's recipe:
    every argument by its bytes, then grid and block), keyed by the image's arch."""
    h = _core.DynamicHash(_core.Hash128.from_hex(record.kernel.static_hash), record.kernel.image.arch)
    for position, arg in enumerate(record.launch.args, start=1):
        h.arg(position, _core.ArgType.bytes, arg)
    return h.grid(*grid).block(*block).finish()


def _align_down(value: int, granularity: int) -> int:
    return value & ~(granularity - 1)


def _align_up(value: int, granularity: int) -> int:
    return _align_down(value + granularity - 1, granularity)


def _mappings(record: Record, granularity: int) -> tuple[list[Mapping], list[tuple[Region, str]]]:
    """Snapshotted allocations, grouped into granule-aligned spans (regions sharing a
    granule share a mapping); allocations with nothing to restore are skipped."""
    spans: list[Mapping] = []
    skipped = []
    for region in sorted(record.allocations, key=lambda r: r.address):
        if not region.snapshotted or region.size == 0:
            skipped.append((region, "empty" if region.size == 0 else f"not snapshotted ({region.kind} memory "
                                                                       "or not reachable from the arguments)"))
            continue
        start, end = _align_down(region.address, granularity), _align_up(region.address + region.size, granularity)
        exact = record.va_range is None or not record.va_range.contains(region.address, region.size)
        last = spans[-1] if spans else None
        if last and start < last.address + last.size and last.exact == exact:
            last.size = max(last.size, end - last.address)
            last.regions.append(region)
        else:
            spans.append(Mapping(start, end - start, [region], exact))
    return spans, skipped


def _reservations(va: VaRange | None, mappings: list[Mapping], alignment: int) -> list[tuple[int, int]]:
    """Address windows to reserve, covering the VA range (when something is mapped in it)
    and every exact-address mapping, aligned out to `alignment`; overlapping windows merged.
    The driver honours the address it is asked for only for large, aligned reservations
    (seen on an H200, driver 580: 32 MiB-aligned and at least 32 MiB; smaller ones are
    placed elsewhere), hence windows rather than the bare spans."""
    spans = [(m.address, m.address + m.size) for m in mappings if m.exact]
    if va is not None and any(not m.exact for m in mappings):
        spans.append((va.base, va.base + va.size))
    windows: list[list[int]] = []
    for start, end in sorted((_align_down(a, alignment), _align_up(b, alignment)) for a, b in spans):
        if windows and start < windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    return [(start, end - start) for start, end in windows]


def _notes(p: ReplayPlan) -> list[str]:
    notes = [f"{f.flag}: {f.detail}" for f in p.record.flags]
    h = p.hashes
    if h.static != h.recorded_static:
        notes.append(f"static hash mismatch: the record says {h.recorded_static}, "
                     f"its image hashes to {h.static}")
    if h.dynamic != h.recorded_dynamic:
        notes.append(f"dynamic hash mismatch: the record says {h.recorded_dynamic}, "
                     f"its arguments, grid and block hash to {h.dynamic}")
    return notes


# --- which code -----------------------------------------------------------------------

def _arch_number(arch: str) -> int:
    match = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    return int(match.group(1)) if match else -1


def _choose_code(record: Record, kind: str, device_arch: str) -> CodeChoice:
    return {"cubin": _choose_cubin, "ptx": _choose_ptx, "ir": _choose_ir}[kind](record, device_arch)


def _choose_cubin(record: Record, device_arch: str) -> CodeChoice:
    image = record.kernel.image
    if image.kind != "cubin":
        raise PlanError(f"{record.path}: --code cubin: the launch ran PTX ({image.arch}), not a cubin; "
                        "use --code ptx")
    if image.arch != device_arch:
        raise PlanError(f"{record.path}: --code cubin: the recorded cubin is for {image.arch}, "
                        f"the device is {device_arch}; use --code ptx or --code ir")
    return CodeChoice("cubin", image.arch, f"the cubin the launch ran ({image.size} bytes)")


def _choose_ptx(record: Record, device_arch: str) -> CodeChoice:
    kernel = record.kernel
    ptx = kernel.ptx or (kernel.image if kernel.image.kind == "ptx" else None)
    if ptx is None:
        raise PlanError(f"{record.path}: --code ptx: the record holds no PTX for {kernel.name}")
    if _arch_number(ptx.arch) > _arch_number(device_arch):
        raise PlanError(f"{record.path}: --code ptx: the PTX is for {ptx.arch}, newer than the "
                        f"device ({device_arch})")
    source = "the image the launch ran" if ptx is kernel.image else "the fatbin's PTX"
    return CodeChoice("ptx", ptx.arch, f"{source} ({ptx.arch}, {ptx.size} bytes), compiled by the driver")


def _choose_ir(record: Record, device_arch: str) -> CodeChoice:
    ir = record.kernel.ir
    if ir is None:
        raise PlanError(f"{record.path}: --code ir: the record holds no LLVM IR for {record.kernel.name}")
    calls = libdevice_calls(record.code("ir"))
    libdevice = find_libdevice(calls) if calls else None
    reason = f"the kernel's LLVM IR ({ir.size} bytes) compiled to PTX for {device_arch} with llvmlite"
    if libdevice:
        reason += f", linked with libdevice ({len(calls)} functions: {', '.join(calls[:3])}" \
                  f"{', ...' if len(calls) > 3 else ''})"
    return CodeChoice("ir", device_arch, reason, libdevice)


def _load_code(record: Record, choice: CodeChoice) -> bytes:
    if choice.kind == "cubin":
        return record.code("image")
    if choice.kind == "ptx":
        return record.code("ptx" if record.kernel.ptx else "image")
    return compile_ir(record.code("ir"), choice.arch, choice.libdevice).encode()


# --- LLVM IR to PTX -------------------------------------------------------------------

def libdevice_calls(bitcode: bytes) -> list[str]:
    """The libdevice functions (`__nv_*`) a module declares without defining."""
    module = _parse_bitcode(bitcode)
    return sorted(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_"))


def find_libdevice(calls=()) -> Path:
    """$CUDA_HOME/nvvm/libdevice/libdevice.10.bc (CUDA_HOME defaults to /usr/local/cuda)."""
    home = Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda")
    path = home / "nvvm" / "libdevice" / "libdevice.10.bc"
    if not path.is_file():
        needed = f"the IR calls {', '.join(calls[:3])}: " if calls else ""
        raise PlanError(f"{needed}libdevice is not at {path} (set CUDA_HOME to the CUDA toolkit)")
    return path


@lru_cache(maxsize=8)
def compile_ir(bitcode: bytes, arch: str = "sm_90", libdevice: Path | None = None, opt: int = 3) -> str:
    """PTX for an LLVM bitcode module: triple set to NVPTX if it has none, libdevice
    linked in (its functions internalized, so unused ones are dropped), the O`opt`
    pipeline run, then code generation for `arch`. Cached: it is CPU work."""
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = _parse_bitcode(bitcode)
    if not module.triple.startswith("nvptx"):
        if module.triple:
            raise PlanError(f"the IR is for {module.triple}, not NVPTX")
        module.triple = NVPTX_TRIPLE
    machine = llvm.Target.from_triple(module.triple).create_target_machine(cpu=arch, opt=opt)
    if libdevice is not None:
        _link_libdevice(module, libdevice)
    builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=opt))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_assembly(module)


def _parse_bitcode(bitcode: bytes):
    import llvmlite.binding as llvm
    try:
        return llvm.parse_bitcode(bitcode)
    except Exception as error:  # llvmlite raises RuntimeError with LLVM's message
        raise PlanError(f"llvmlite (LLVM {'.'.join(map(str, llvm.llvm_version_info))}) cannot read "
                        f"the record's IR: {str(error).strip()}") from None


def _link_libdevice(module, path: Path) -> None:
    import llvmlite.binding as llvm
    library = llvm.parse_bitcode(path.read_bytes())
    library.triple = module.triple
    library.data_layout = module.data_layout
    module.link_in(library)
    for function in module.functions:
        if function.name.startswith("__nv_") and not function.is_declaration:
            function.linkage = llvm.Linkage.internal


# --- describing a plan ----------------------------------------------------------------

def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _describe(p: ReplayPlan) -> list[str]:
    r, h = p.record, p.hashes
    lines = [f"record    {r.path}",
             f"kernel    {r.kernel.demangled}  ({r.kernel.name})",
             f"code      {p.code.kind}: {p.code.reason}",
             f"launch    grid {_dims(p.grid)}  block {_dims(p.block)}  shared {p.shared_bytes} B",
             f"args      {len(p.args)} bytes: {p.args.hex()}",
             f"static    {h.recorded_static}  {_agreement(h.recorded_static, h.static, 'the image')}",
             f"dynamic   {h.recorded_dynamic}  {_agreement(h.recorded_dynamic, h.dynamic, 'the launch')}"]
    lines += [f"reserve   {a:#x} +{_size(s)}" for a, s in p.reservations]
    for m in p.mappings:
        what = ", ".join(f"{x.address:#x} ({_size(x.size)})" for x in m.regions)
        lines.append(f"map       {m.address:#x} +{_size(m.size)}{' (exact address)' if m.exact else ''}: {what}")
    lines += [f"global    {g.name} ({_size(g.size)}), by name" for g in p.globals]
    lines += [f"skip      {region.label}: {why}" for region, why in p.skipped]
    lines += [f"note      {note}" for note in p.notes]
    return lines


def _agreement(recorded: str, computed: str, what: str) -> str:
    return "matches" if recorded == computed else f"MISMATCH: {what} hashes to {computed}"


def _dims(d) -> str:
    return ",".join(map(str, d))


def _plan_json(p: ReplayPlan) -> dict:
    return {
        "format": "kir.replay-plan/1", "record": str(p.record.path), "kernel": p.record.kernel.name,
        "device_arch": p.device_arch, "granularity": p.granularity,
        "code": {"kind": p.code.kind, "arch": p.code.arch, "reason": p.code.reason,
                 "libdevice": str(p.code.libdevice) if p.code.libdevice else None},
        "va_range": {"base": p.va_range.base, "size": p.va_range.size} if p.va_range else None,
        "reservations": [{"address": a, "size": s} for a, s in p.reservations],
        "mappings": [{"address": m.address, "size": m.size, "exact": m.exact,
                      "regions": [x.address for x in m.regions]} for m in p.mappings],
        "globals": [{"name": g.name, "size": g.size} for g in p.globals],
        "skipped": [{"address": x.address, "size": x.size, "reason": why} for x, why in p.skipped],
        "args": p.args.hex(), "grid": list(p.grid), "block": list(p.block), "shared_bytes": p.shared_bytes,
        "static_hash": p.hashes.recorded_static, "dynamic_hash": p.hashes.recorded_dynamic,
        "computed_static_hash": p.hashes.static, "computed_dynamic_hash": p.hashes.dynamic,
        "hashes_match": p.hashes_match, "notes": p.notes,
    }


# --- comparing memory -----------------------------------------------------------------

@dataclass
class Tolerance:
    """Outputs compared as `dtype` values: a region passes when norm(actual - expected)
    <= atol + rtol * norm(expected). NaN where the record has none fails."""
    atol: float = 0.0
    rtol: float = 0.0
    norm: str = "linf"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"norm {self.norm!r}: expected one of {', '.join(NORMS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.atol < 0 or self.rtol < 0:
            raise ValueError("atol and rtol must not be negative")


@dataclass
class Mismatch:
    region: str             #: the region's label ("device allocation at 0x...", "global g")
    address: int            #: the recorded address
    first_offset: int       #: the first byte that differs
    differing_bytes: int
    norm: float | None = None   #: with a tolerance: the norm of the difference
    limit: float | None = None  #: ... and what it had to stay under


def compare(region: Region, actual: bytes, expected: bytes, tolerance: Tolerance | None = None) -> Mismatch | None:
    """None when `actual` passes for `expected`: bitwise, or within the tolerance."""
    if actual == expected:
        return None
    first, count = _bitwise_difference(actual, expected)
    mismatch = Mismatch(region.label, region.address, first, count)
    if tolerance is None:
        return mismatch
    mismatch.norm, mismatch.limit = _norms(actual, expected, tolerance)
    passes = mismatch.norm <= mismatch.limit and _tail(actual, tolerance) == _tail(expected, tolerance)
    return None if passes else mismatch


def _bitwise_difference(a: bytes, b: bytes) -> tuple[int, int]:
    """(first differing offset, number of differing bytes), at C speed."""
    n = min(len(a), len(b))
    xor = (int.from_bytes(a[:n], "little") ^ int.from_bytes(b[:n], "little")).to_bytes(n, "little")
    count = n - xor.count(0) + abs(len(a) - len(b))
    return len(xor) - len(xor.lstrip(b"\0")), count


def _tail(data: bytes, tolerance: Tolerance) -> bytes:
    """Bytes after the last whole element: compared bitwise."""
    item = 4 if tolerance.dtype == "float32" else 8
    return data[len(data) - len(data) % item:]


def _norms(actual: bytes, expected: bytes, tolerance: Tolerance) -> tuple[float, float]:
    try:
        import numpy as np
    except ImportError:
        raise ReplayError("comparing with a tolerance needs numpy") from None
    item = np.dtype(tolerance.dtype).itemsize
    n = len(expected) // item * item
    x = np.frombuffer(actual[:n], tolerance.dtype).astype(np.float64)
    y = np.frombuffer(expected[:n], tolerance.dtype).astype(np.float64)
    order = {"l1": 1, "l2": 2, "linf": np.inf}[tolerance.norm]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(np.isnan(x) & np.isnan(y), 0.0, x - y)
        value = float(np.linalg.norm(diff, order)) if n else 0.0
        limit = tolerance.atol + tolerance.rtol * (float(np.linalg.norm(y, order)) if n else 0.0)
    return (value if value == value else float("inf")), limit


def tolerance_for(region: Region, tolerance) -> Tolerance | None:
    """A Tolerance, or a dict of them by global name or allocation address (key None:
    every other region)."""
    if not isinstance(tolerance, dict):
        return tolerance
    key = region.name if region.is_global else region.address
    return tolerance.get(key, tolerance.get(None))


# --- running --------------------------------------------------------------------------

@dataclass
class RunResult:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    dynamic_hash: str           #: the hash of the variant launched
    variant: bool               #: grid or block differ from the recording
    times_ms: list[float]
    verified: bool | None       #: None when not verified
    mismatches: list[Mismatch]

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None


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
        raise NoDeviceError(f"no CUDA device: cuda-bindings is not installed ({error})") from None
    return driver


class Replayer:
    """A recorded launch set up on a GPU: its memory mapped at the recorded addresses and
    its code loaded. `close()` (or leaving a `with` block) undoes everything."""

    def __init__(self, record: Record, code: str = "cubin", device: int = 0) -> None:
        self.record, self.driver = record, _driver()
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

    def _load_code(self) -> None:
        d = self.driver
        image = self.plan.code_bytes()
        if self.plan.code.kind != "cubin" and not image.endswith(b"\0"):
            image += b"\0"  # the driver reads PTX as a C string
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

    def _global_address(self, region: Region) -> int | None:
        """Where the loaded module holds the global; None when it has no such global
        (code compiled from a per-kernel IR module defines only what the kernel uses)."""
        d = self.driver
        result = d.cuModuleGetGlobal(self.module, region.name.encode())
        if result[0] == d.CUresult.CUDA_ERROR_NOT_FOUND:
            return None
        address, size = self._call(f"cuModuleGetGlobal({region.name})", result)
        if size != region.size:
            raise ReplayError(f"global {region.name} is {size} bytes in the loaded module, "
                              f"{region.size} in the record")
        return int(address)

    # -- running --

    def restore(self) -> None:
        """Copy every prologue (allocations and globals) into device memory."""
        d = self.driver
        for index, address in self._addresses.items():
            data = self._prologue(index)
            self._call(f"cuMemcpyHtoD to {address:#x}", d.cuMemcpyHtoD(address, data, len(data)))
        self._call("cuCtxSynchronize", d.cuCtxSynchronize())

    def _prologue(self, index: int) -> bytes:
        if index not in self._prologues:
            self._prologues[index] = self.record.prologue(index)
        return self._prologues[index]

    def run(self, grid=None, block=None, shared_bytes=None, repeat: int = 1, verify: bool = True,
            tolerance=None) -> RunResult:
        """Restore, launch and time `repeat` times (each from the prologue), then compare
        every snapshotted region with its epilogue (bitwise, or within `tolerance`: a
        Tolerance, or a dict of them by global name / allocation address)."""
        if repeat < 1:
            raise ValueError(f"repeat {repeat}: must be at least 1")
        launch = self.record.launch
        grid, block = tuple(grid or launch.grid), tuple(block or launch.block)
        shared = launch.shared_bytes if shared_bytes is None else shared_bytes
        self._allow_shared(shared)
        parameters = _LaunchParameters(self.driver, self.plan.args)
        times = [self._timed_launch(grid, block, shared, parameters) for _ in range(repeat)]
        mismatches = self.verify(tolerance) if verify else []
        return RunResult(grid=grid, block=block, shared_bytes=shared,
                         dynamic_hash=str(self.plan.variant_dynamic_hash(grid, block)),
                         variant=(grid, block) != (launch.grid, launch.block), times_ms=times,
                         verified=(not mismatches) if verify else None, mismatches=mismatches)

    def _allow_shared(self, shared: int) -> None:
        if shared > 48 << 10:
            d = self.driver
            attribute = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._call("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                       d.cuFuncSetAttribute(self.function, attribute, shared))

    def _timed_launch(self, grid, block, shared: int, parameters: _LaunchParameters) -> float:
        d = self.driver
        self.restore()
        start, end = (self._call("cuEventCreate", d.cuEventCreate(0)) for _ in range(2))
        try:
            self._call("cuEventRecord", d.cuEventRecord(start, 0))
            self._call(f"cuLaunchKernel({self.record.kernel.name})",
                       d.cuLaunchKernel(self.function, *grid, *block, shared, 0, None, parameters.extra))
            self._call("cuEventRecord", d.cuEventRecord(end, 0))
            self._call("the kernel", d.cuEventSynchronize(end))
            return float(self._call("cuEventElapsedTime", d.cuEventElapsedTime(start, end)))
        finally:
            d.cuEventDestroy(start)
            d.cuEventDestroy(end)

    def verify(self, tolerance=None) -> list[Mismatch]:
        """Compare device memory with every epilogue; the regions that differ."""
        d = self.driver
        mismatches = []
        for index, address in self._addresses.items():
            region = self.record.regions[index]
            actual = bytearray(region.size)
            self._call(f"cuMemcpyDtoH from {address:#x}", d.cuMemcpyDtoH(actual, address, region.size))
            found = compare(region, bytes(actual), self.record.epilogue(region), tolerance_for(region, tolerance))
            if found:
                mismatches.append(found)
        return mismatches
