"""Planning a replay, with no GPU (docs/record-format.md, "Replaying"): what a replay
does and everything that can be checked on the CPU — the address windows to
reserve, the memory to map there (allocations rounded out to the mapping
granularity, merged when they share a granule), the globals to restore by name,
the code to load and why, the packed parameter buffer, and the kernel hashes
recomputed from the record's own bytes under THE static-hash policy
(kir/hash/kernel_code.hpp, the one the hook applied when it registered the kernel);
a mismatch is reported in `plan.notes`, never ignored.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kir import _core, hashing
from kir.errors import KirError, PlanError
from kir.jit import amdgpu, libdevice
from kir.record import Record, Region, VaRange
from kir.words import plural

CODE_KINDS = ("launched", "cubin", "ptx", "ir", "code-object")
RESERVE_ALIGNMENT = 32 << 20  #: see _reservations


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
    """The code a replay loads, and why."""
    kind: str               #: "cubin", "ptx", "ir" or "code-object" (AMDGPU)
    arch: str               #: the code's architecture ("sm_90", "gfx942"), or the one IR is compiled for
    reason: str             #: why this code, in words
    libdevice: Path | None = None  #: IR: the libdevice linked in (the module calls __nv_*)
    units: int = 0          #: PTX of relocatable device code: how many units are linked (0: one module)


@dataclass
class Hashes:
    """The hashes the record carries and the same recomputed from its contents."""
    recorded_static: str
    recorded_identity: str | None  #: the record's launch identity (None: a record older than it)
    recorded_dynamic: str | None   #: the record's format-1 dynamic hash (None: absent)
    static: str                    #: recomputed from the record's image
    #: recomputed from the recorded static hash, arguments, grid, block and shared memory
    #: (None when the record has no launch identity to compare with)
    identity: str | None
    #: format 1's dynamic hash recomputed (arguments, grid and block; None when absent)
    dynamic: str | None

    @property
    def match(self) -> bool:
        """Every recomputed hash equals the recorded one."""
        return (self.static == self.recorded_static and self.identity == self.recorded_identity
                and self.dynamic == self.recorded_dynamic)


@dataclass
class ReplayPlan:
    """What replaying a record does (`plan`): the code, the memory to reserve and map,
    the globals to restore, the argument buffer and the launch configuration; no GPU."""
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
        """`hashes.match`."""
        return self.hashes.match

    @property
    def exact(self) -> list[Mapping]:
        """Mappings outside the VA range, each reserved at its own address."""
        return [m for m in self.mappings if m.exact]

    def code_units(self) -> list[bytes]:
        """Relocatable device code replayed from PTX (`code.units` > 0): every unit's
        PTX, in link order, for the linker (nvJitLink or cuLink*) to JIT and link."""
        return self.record.ptx_units() if self.code.units else []

    def code_bytes(self) -> bytes:
        """The code to load: the recorded image or PTX, or PTX compiled from the IR (once).
        For linked units (`code.units`), see code_units."""
        if self._code_bytes is None:
            self._code_bytes = _load_code(self.record, self.code)
        return self._code_bytes

    def variant_launch_identity(self, grid, block, shared_bytes: int | None = None) -> str:
        """The launch identity of this launch at another grid, block (and dynamic shared
        memory, by default the recorded one), with the recorded arguments: what a
        recorder would file the variant under."""
        return launch_identity(self.record, tuple(grid), tuple(block), shared_bytes)

    def describe(self) -> str:
        """The plan as text, one step a line."""
        return "\n".join(_describe(self))

    def to_json(self) -> dict:
        """The plan as JSON (`kir replay --plan --json`)."""
        return _plan_json(self)


def plan(record: Record, code: str = "launched", device_arch: str = "sm_90",
         granularity: int = 2 << 20, reserve_alignment: int = RESERVE_ALIGNMENT) -> ReplayPlan:
    """What replaying `record` on a `device_arch` GPU does (see the module's docstring):
    memory is mapped in `granularity` units inside reservations aligned to `reserve_alignment`."""
    if code not in CODE_KINDS:
        raise PlanError(f"unknown code kind {code!r}: expected one of {', '.join(CODE_KINDS)}")
    for name, value in (("granularity", granularity), ("reserve_alignment", reserve_alignment)):
        if value <= 0 or value & (value - 1):
            raise PlanError(f"{name} {value} is not a power of two")
    no_layout = any(f.flag == "no-layout" for f in record.flags)
    if record.kernel.image is None and (record.kernel.ir is None or no_layout):
        raise PlanError(f"{record.path}: the record holds no device image (flag no-layout)"
                        + (" and no LLVM IR" if record.kernel.ir is None else "")
                        + f" for {record.kernel.name}: "
                        + ("there is no code to replay" if record.kernel.ir is None
                           else "its hashes and argument layout cannot be checked"))
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


PARSERS = {"cubin": _core.parse_cubin, "ptx": _core.parse_ptx, "code-object": _core.parse_code_object}


def recompute_hashes(record: Record) -> Hashes:
    """The static hash from the record's image bytes, and the launch identity (and
    format 1's dynamic hash, where the record has one) from the recorded static hash
    (so each is checked on its own), the arguments, grid, block and shared memory."""
    launch, grid, block = record.launch, record.launch.grid, record.launch.block
    return Hashes(recorded_static=record.kernel.static_hash, recorded_identity=launch.launch_identity,
                  recorded_dynamic=launch.dynamic_hash, static=static_hash(record),
                  identity=launch_identity(record, grid, block) if launch.launch_identity is not None else None,
                  dynamic=dynamic_hash(record, grid, block) if launch.dynamic_hash is not None else None)


def static_hash(record: Record) -> str:
    """The kernel's static hash (32 hex digits, as the record carries it) recomputed
    from the image the launch ran, as the hook
    computed it at registration (libkir/hook/layer.cpp): the image decoded by the
    parser of its kind, its digest set, then THE policy (kir.hashing.kernel_static_hash):
    the IR embedded for the kernel, else the image's translation-unit modules (code
    kind "ir"), else the image itself. An image that does not decode hashes as the
    hook hashes a kernel it has no code for: code kind "unknown", no modules."""
    return _static_hash(record).hex


def _static_hash(record: Record) -> _core.Hash128:
    image = record.kernel.image
    if image is None:  # a record holding IR only (imported, or written without the image)
        return _core.static_hash(record.kernel.name, "ir", [record.code("ir")])
    if image.kind not in PARSERS:
        raise PlanError(f"{record.path}: kernel.image is of kind {image.kind!r}: expected one of "
                        f"{', '.join(PARSERS)}")
    return image_static_hash(record.kernel.name, image.kind, record.code("image"))


def image_static_hash(name: str, kind: str, data: bytes) -> _core.Hash128:
    """The static hash of kernel `name` in an image of `kind` (a key of PARSERS), as the
    hook computes it at registration (above; also `kir import-omp`, kir.omp_record)."""
    try:
        code = PARSERS[kind](data)
    except KirError:
        return _core.static_hash(name, "unknown", [])
    code.image_digest = _core.xxh3_128(data)
    known = _core.kernel_static_hash(code, name)  # None: a kernel the image lacks
    return known if known is not None else _core.static_hash(name, "unknown", [])


def launch_identity(record: Record, grid, block, shared_bytes: int | None = None) -> str:
    """The launch identity of the recorded launch at this grid and block (the hook's
    recipe, kir_launch_identity: every argument by its bytes, grid, block and dynamic
    shared memory, by default the recorded one), keyed by the image's arch."""
    shared = record.launch.shared_bytes if shared_bytes is None else shared_bytes
    return hashing.launch_identity(record.kernel.static_hash, record_arch(record), record.launch.args,
                                   grid=grid, block=block, shared_bytes=shared)


def dynamic_hash(record: Record, grid, block) -> str:
    """Format 1's dynamic hash (32 hex digits) of the recorded launch at this grid and block (what the
    hook computed before the launch identity: every argument by its bytes, then grid
    and block, no shared memory), keyed by the image's arch."""
    h = _core.DynamicHash(_core.HashDomain.dynamic_v1, _core.Hash128.from_hex(record.kernel.static_hash),
                          record_arch(record))
    for position, arg in enumerate(record.launch.args, start=1):
        h.arg(position, hashing.ArgType.bytes, arg)
    return h.grid(*grid).block(*block).finish().hex


def record_arch(record: Record) -> str:
    """The arch the hook keyed the launch's hashes with: the launched image's, or
    the recording device's for a record holding IR only."""
    return record.kernel.image.arch if record.kernel.image is not None else record.device.arch


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
    if h.identity != h.recorded_identity:
        notes.append(f"launch identity mismatch: the record says {h.recorded_identity}, "
                     f"its arguments, grid, block and shared memory hash to {h.identity}")
    if h.dynamic != h.recorded_dynamic:
        notes.append(f"dynamic hash mismatch: the record says {h.recorded_dynamic}, "
                     f"its arguments, grid and block hash to {h.dynamic}")
    return notes


# --- which code -----------------------------------------------------------------------

def _arch_number(arch: str) -> int:
    match = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    return int(match.group(1)) if match else -1


def _choose_code(record: Record, kind: str, device_arch: str) -> CodeChoice:
    return {"launched": _choose_launched, "cubin": _choose_cubin, "ptx": _choose_ptx,
            "ir": _choose_ir, "code-object": _choose_code_object}[kind](record, device_arch)


def _choose_launched(record: Record, device_arch: str) -> CodeChoice:
    """The code the launch ran: its cubin, or its PTX when the driver compiled PTX
    (cuFFT's modules; a fatbin without a cubin for the device); a record holding
    IR but no image: its IR."""
    if record.kernel.image is None:
        choice = _choose_ir(record, device_arch)
        choice.reason += " (the record holds no device image)"
        return choice
    kind = record.kernel.image.kind
    choose = {"cubin": _choose_cubin, "code-object": _choose_code_object}.get(kind, _choose_ptx)
    return choose(record, device_arch)


def _no_image(record: Record, kind: str) -> None:
    if record.kernel.image is None:
        raise PlanError(f"{record.path}: --code {kind}: the record holds no device image for "
                        f"{record.kernel.name}, only its LLVM IR; use --code ir")


def _choose_cubin(record: Record, device_arch: str) -> CodeChoice:
    _no_image(record, "cubin")
    image = record.kernel.image
    if image.kind != "cubin":
        raise PlanError(f"{record.path}: --code cubin: the launch ran PTX ({image.arch}), not a cubin; "
                        "use --code ptx")
    if not image.arch:  # recorded before the hook read a bare cubin's arch (NVRTC, cuModuleLoadData)
        image.arch = _cubin_arch(record)
    if image.arch != device_arch:
        raise PlanError(f"{record.path}: --code cubin: the recorded cubin is for {image.arch}, "
                        f"the device is {device_arch}; use --code ptx or --code ir")
    return CodeChoice("cubin", image.arch, f"the cubin the launch ran ({image.size} bytes)")


def _target_features(arch: str) -> tuple[str, dict[str, str]]:
    """An AMDGPU target ID ("gfx90a:sramecc+:xnack-", LLVM's AMDGPUUsage "Target ID"):
    the processor and its features ("xnack": "+")."""
    processor, *features = arch.split(":")
    return processor, {f[:-1]: f[-1] for f in features if f[-1:] in "+-" and len(f) > 1}


def _choose_code_object(record: Record, device_arch: str) -> CodeChoice:
    """The AMDGPU code object the launch ran (HIP): loadable on a device of the same
    processor whose features agree with the ones the code object was built with (a
    feature the code object leaves unset, "any", runs either way; LLVM's AMDGPUUsage,
    "Target ID")."""
    _no_image(record, "code-object")
    image = record.kernel.image
    if image.kind != "code-object":
        raise PlanError(f"{record.path}: --code code-object: the launch ran a {image.kind}, not an AMDGPU "
                        "code object")
    processor, features = _target_features(image.arch)
    device, device_features = _target_features(device_arch)
    if processor != device:
        raise PlanError(f"{record.path}: the recorded code object is for {image.arch}, the device is "
                        f"{device_arch}")
    for feature, sign in features.items():
        if device_features.get(feature, sign) != sign:
            raise PlanError(f"{record.path}: the recorded code object is for {image.arch} ({feature}{sign}), "
                            f"the device is {device_arch}")
    return CodeChoice("code-object", image.arch, f"the AMDGPU code object the launch ran ({image.arch}, "
                                                 f"{image.size} bytes)")


def _cubin_arch(record: Record) -> str:
    """The recorded cubin's own architecture, from its ELF header (e_flags)."""
    try:
        return _core.cubin_arch(record.code("image"))
    except ValueError as error:
        raise PlanError(f"{record.path}: the recorded image of {record.kernel.name} names no architecture "
                        f"and is {error}") from None


def _choose_ptx(record: Record, device_arch: str) -> CodeChoice:
    kernel = record.kernel
    if kernel.ptx_units and not kernel.ptx:
        return _choose_ptx_units(record, device_arch)
    if kernel.ptx is None:
        _no_image(record, "ptx")
    ptx = kernel.ptx or (kernel.image if kernel.image is not None and kernel.image.kind == "ptx" else None)
    if ptx is None:
        raise PlanError(f"{record.path}: --code ptx: the record holds no PTX for {kernel.name}")
    if _arch_number(ptx.arch) > _arch_number(device_arch):
        raise PlanError(f"{record.path}: --code ptx: the PTX is for {ptx.arch}, newer than the "
                        f"device ({device_arch})")
    source = "the image the launch ran" if ptx is kernel.image else "the fatbin's PTX"
    return CodeChoice("ptx", ptx.arch, f"{source} ({ptx.arch}, {ptx.size} bytes), compiled by the driver")


def _choose_ptx_units(record: Record, device_arch: str) -> CodeChoice:
    """Relocatable device code (nvcc -rdc=true): the launched image was device-linked
    from several units, whose kernels may call each other's device functions; from PTX
    it is rebuilt by JIT-compiling every unit's PTX and linking them."""
    units = record.kernel.ptx_units
    newest = max(units, key=lambda u: _arch_number(u.arch))
    if _arch_number(newest.arch) > _arch_number(device_arch):
        raise PlanError(f"{record.path}: --code ptx: unit {units.index(newest)}'s PTX is for {newest.arch}, "
                        f"newer than the device ({device_arch})")
    archs = sorted({u.arch for u in units}, key=_arch_number)
    return CodeChoice("ptx", newest.arch,
                      f"the PTX of the {len(units)} relocatable units the kernel was device-linked from "
                      f"({', '.join(archs)}, {sum(u.size for u in units)} bytes), JIT-compiled and linked "
                      f"for {device_arch} by the driver linker", units=len(units))


def _choose_ir(record: Record, device_arch: str) -> CodeChoice:
    ir = record.kernel.ir
    if ir is None:
        raise PlanError(f"{record.path}: --code ir: the record holds no LLVM IR for {record.kernel.name}")
    if amdgpu.is_amdgpu(device_arch):  # the ROCm device libraries are linked by kir.jit when called
        return CodeChoice("ir", device_arch, f"the kernel's LLVM IR ({ir.size} bytes) compiled to an AMDGPU code "
                                             f"object for {device_arch} by kir.jit (llvmlite, ld.lld)")
    calls = libdevice.calls_in(record.code("ir"), "the record's IR", PlanError)
    library = libdevice.find(calls, PlanError) if calls else None
    reason = f"the kernel's LLVM IR ({ir.size} bytes) compiled to PTX for {device_arch} by kir.jit (llvmlite)"
    if library:
        reason += f", linked with libdevice ({plural(len(calls), 'function')}: {', '.join(calls[:3])}" \
                  f"{', ...' if len(calls) > 3 else ''})"
    return CodeChoice("ir", device_arch, reason, library)


def _load_code(record: Record, choice: CodeChoice) -> bytes:
    if choice.units:
        raise PlanError(f"{record.path}: the kernel's code is {choice.units} PTX units to link: "
                        "use ReplayPlan.code_units()")
    if choice.kind in ("cubin", "code-object"):
        return record.code("image")
    if choice.kind == "ptx":
        return record.code("ptx" if record.kernel.ptx else "image")
    return _compile_ir(record.code("ir"), record.kernel.name, choice.arch)


@lru_cache(maxsize=8)
def _compile_ir(bitcode: bytes, kernel: str, arch: str) -> bytes:
    """The kernel's PTX (an AMDGPU target-id: its code object), compiled by kir.jit from
    the record's IR, nothing specialized (libdevice, or the ROCm device libraries,
    linked in when called). Cached: it is CPU work."""
    import kir.jit
    try:
        return kir.jit.compile(bitcode, kernel, arch, options={} if amdgpu.is_amdgpu(arch) else {"kind": "ptx"}).code
    except KirError as error:
        raise PlanError(str(error)) from None


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
             f"static    {h.recorded_static}  {_agreement(h.recorded_static, h.static, 'the image')}"]
    if h.recorded_identity is not None:
        lines.append(f"identity  {h.recorded_identity}  {_agreement(h.recorded_identity, h.identity, 'the launch')}")
    if h.recorded_dynamic is not None:
        lines.append(f"dynamic   {h.recorded_dynamic}  "
                     f"{_agreement(h.recorded_dynamic, h.dynamic, 'the launch')} (hash format 1)")
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
                 "libdevice": str(p.code.libdevice) if p.code.libdevice else None, "units": p.code.units},
        "va_range": {"base": p.va_range.base, "size": p.va_range.size} if p.va_range else None,
        "reservations": [{"address": a, "size": s} for a, s in p.reservations],
        "mappings": [{"address": m.address, "size": m.size, "exact": m.exact,
                      "regions": [x.address for x in m.regions]} for m in p.mappings],
        "globals": [{"name": g.name, "size": g.size} for g in p.globals],
        "skipped": [{"address": x.address, "size": x.size, "reason": why} for x, why in p.skipped],
        "args": p.args.hex(), "grid": list(p.grid), "block": list(p.block), "shared_bytes": p.shared_bytes,
        "static_hash": p.hashes.recorded_static, "launch_identity": p.hashes.recorded_identity,
        "dynamic_hash": p.hashes.recorded_dynamic, "computed_static_hash": p.hashes.static,
        "computed_launch_identity": p.hashes.identity, "computed_dynamic_hash": p.hashes.dynamic,
        "hashes_match": p.hashes_match, "notes": p.notes,
    }


__all__ = ["CODE_KINDS", "CodeChoice", "dynamic_hash", "Hashes", "image_static_hash", "launch_identity", "Mapping", "pack_args",
           "PARSERS", "plan", "recompute_hashes", "record_arch", "ReplayPlan", "RESERVE_ALIGNMENT",
           "static_hash"]
