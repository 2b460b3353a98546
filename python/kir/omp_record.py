"""Read LLVM's own OpenMP kernel records (`LIBOMPTARGET_RECORD=1`, replayed by
`llvm-omp-kernel-replay`) and convert them into kir records (`kir import-omp`).

The layout is libomptarget's, read from llvm/llvm-project (docs/omp-records.md has the
full mapping and the differences between releases): the plugin-independent
`RecordReplayTy` in offload/plugins-nextgen/common/src/PluginInterface.cpp, the
version that libomptarget.so.22.1 (Debian's liboffload-22, 22.1.8) is built from.
When a kernel is launched while recording, `GenericKernelTy::launch` calls
`saveImage`, `saveKernelInput` and `saveKernelDescr`, and
`GenericDeviceTy::launchKernel`, with `LIBOMPTARGET_RR_SAVE_OUTPUT`,
`saveKernelOutputInfo`; each writes into the process's working directory a file
named by the kernel's symbol (`<name>`):

- `<name>.image`: `saveImage`, the device image the kernel was loaded from
  (`DeviceImageTy::getMemoryBuffer`: a cubin, an AMDGPU code object, the host
  plugin's ELF; LLVM 19 writes the bitcode instead where the image was JIT-compiled,
  `getTgtImageBitcode`).
- `<name>.json`: `saveKernelDescr`, one llvm::json object (compact, keys sorted):
  `Name`, `NumArgs`, `NumTeamsClause` and `ThreadLimitClause` (the launch's blocks and
  threads after the plugin's adjustments, `NumBlocks[0]`/`NumThreads[0]`, despite
  the names), `LoopTripCount`, `DeviceMemorySize` (the bytes the record/replay bump
  allocator handed out: the size of `.memory`), `DeviceId`, `BumpAllocVAStart` (its
  first address), `ArgPtrs` (NumArgs integers), `ArgOffsets` (NumArgs zeros).
- `<name>.globals`: `dumpGlobals`, per global of non-zero size registered with
  the record (`addEntry`): its name and a NUL, u32 size, its bytes; no count, no
  address (host-endian: little-endian on every plugin's host).
- `<name>.memory`: `saveKernelInput` -> `dumpDeviceMemory`, the whole bump region
  `[BumpAllocVAStart, +DeviceMemorySize)` before the launch.
- `<name>.original.output` (`LIBOMPTARGET_RR_SAVE_OUTPUT=1`):
  `saveKernelOutputInfo`, the same region after the kernel.

A kernel launched again overwrites its files: a record is a kernel's last launch.
Nothing here trusts a size before checking it against the file: a malformed file is
an `OmpRecordError` naming the file and the byte offset or the JSON field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kir import _core, hashing
from kir.errors import KirError, OmpRecordError
from kir.files import load_json, read_file, read_sidecar, write_sidecar

#: libomptarget's launch entry point (offload/libomptarget/interface.cpp), what the record's launch.api names
LAUNCH_API = "__tgt_target_kernel"
#: the bump allocator's alignment (RecordReplayTy::alloc: `constexpr int Alignment = 16`)
ALIGNMENT = 16
#: the file `convert` keeps beside the records (what a kir record has no field for)
SIDECAR = "omp-import.json"
#: the record flag of a region whose contents after the kernel LLVM did not save: its
#: epilogue is its prologue (docs/record-format.md, "Flags")
EPILOGUE_ASSUMED = "epilogue-assumed"
_SUFFIXES = (".image", ".globals", ".memory", ".original.output")
_MAX_ARGS = 65536 // 8  # a kir record's parameter buffer holds 64 KiB (docs/record-format.md)
_INT64 = (-(1 << 63), (1 << 64) - 1)  # llvm::json integers: int64, or uint64 above INT64_MAX


@dataclass
class Descriptor:
    """`<name>.json` (RecordReplayTy::saveKernelDescr)."""
    path: Path
    name: str
    num_args: int
    num_teams: int           #: `NumTeamsClause`: the launch's blocks (NumBlocks[0])
    thread_limit: int        #: `ThreadLimitClause`: its threads per block (NumThreads[0])
    loop_trip_count: int
    memory_size: int         #: `DeviceMemorySize`
    device_id: int
    va_start: int            #: `BumpAllocVAStart`
    arg_ptrs: list[int]
    arg_offsets: list[int]


@dataclass
class Global:
    name: str
    data: bytes
    offset: int              #: where its entry starts in `.globals`


@dataclass
class Image:
    kind: str                #: "cubin", "code-object", "ir" or "host" (no kir kind: not stored)
    arch: str
    data: bytes
    what: str                #: one line on what it is (error messages, the sidecar)


@dataclass
class Kernel:
    """One recorded kernel: its descriptor and the files beside it."""
    descriptor: Descriptor
    image: Image
    globals: list[Global]
    memory: bytes
    output: bytes | None     #: `.original.output`, None when not saved
    #: how `ArgPtrs` reads: "values" (LLVM 19: the arguments) or "slot-addresses"
    #: (LLVM 20-22: the host addresses of the plugin's argument array, below)
    args: str = "values"
    warnings: list[str] = field(default_factory=list)


def _at(path: Path, where: str, message: str) -> str:
    """An error message naming the file and, where there is one, the JSON field."""
    return f"{path}: {where}: {message}" if where else f"{path}: {message}"


def _int(doc: dict, key: str, path: Path, low: int = _INT64[0], high: int = _INT64[1]) -> int:
    if key not in doc:
        raise OmpRecordError(_at(path, "", f"missing field {key!r}"))
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise OmpRecordError(_at(path, key, f"expected an integer, found {type(value).__name__}"))
    if not low <= value <= high:
        raise OmpRecordError(_at(path, key, f"{value} is out of range ({low} to {high})"))
    return value


def _ints(doc: dict, key: str, count: int, path: Path) -> list[int]:
    value = doc.get(key)
    if key not in doc:
        raise OmpRecordError(_at(path, "", f"missing field {key!r}"))
    if not isinstance(value, list):
        raise OmpRecordError(_at(path, key, f"expected an array, found {type(value).__name__}"))
    if len(value) != count:
        raise OmpRecordError(_at(path, key, f"{len(value)} entries, NumArgs is {count}"))
    for i, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool) or not _INT64[0] <= item <= _INT64[1]:
            raise OmpRecordError(_at(path, f"{key}[{i}]", f"expected a 64-bit integer, found {item!r:.40}"))
    return value


def read_descriptor(path: Path | str) -> Descriptor:
    """`<name>.json`, as saveKernelDescr writes it and llvm-omp-kernel-replay reads it
    (offload/tools/kernelreplay/llvm-omp-kernel-replay.cpp, main)."""
    path = Path(path)
    doc = load_json(path, error=OmpRecordError)
    if not isinstance(doc, dict):
        raise OmpRecordError(_at(path, "", "expected a JSON object (saveKernelDescr's)"))
    if "VAllocAddr" in doc or "NumThreads" in doc:  # RecordReplay.cpp, NativeRecordReplayTy::recordDescImpl
        raise OmpRecordError(_at(path, "", "the layout of libomptarget after LLVM 22 (VAllocAddr, NumThreads: "
                                           "RecordReplay.cpp), which kir import-omp does not read yet "
                                           "(docs/omp-records.md)"))
    if "Name" not in doc:
        raise OmpRecordError(_at(path, "", "missing field 'Name'"))
    name = doc["Name"]
    if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
        raise OmpRecordError(_at(path, "Name", f"{name!r:.80} is not a kernel symbol"))
    if path.name != name + ".json":
        raise OmpRecordError(_at(path, "Name", f"{name!r} does not name this file (saveKernelDescr writes "
                                               "<Name>.json)"))
    num_args = _int(doc, "NumArgs", path, 0, _MAX_ARGS)  # int32 in the writer; kir's buffer is 64 KiB
    arg_ptrs = _ints(doc, "ArgPtrs", num_args, path)
    arg_offsets = _ints(doc, "ArgOffsets", num_args, path)
    va_start = _int(doc, "BumpAllocVAStart", path)  # an intptr_t: negative above 2^63
    size = _int(doc, "DeviceMemorySize", path, 0)
    va_start &= (1 << 64) - 1
    if va_start + size > 1 << 64:
        raise OmpRecordError(_at(path, "DeviceMemorySize", f"BumpAllocVAStart {va_start:#x} + {size} runs past "
                                                           "the 64-bit address space"))
    return Descriptor(path=path, name=name, num_args=num_args,
                      num_teams=_int(doc, "NumTeamsClause", path, 1, (1 << 32) - 1),
                      thread_limit=_int(doc, "ThreadLimitClause", path, 1, (1 << 32) - 1),
                      loop_trip_count=_int(doc, "LoopTripCount", path, 0),
                      memory_size=size, device_id=_int(doc, "DeviceId", path, 0, (1 << 31) - 1),
                      va_start=va_start, arg_ptrs=[p & ((1 << 64) - 1) for p in arg_ptrs],
                      arg_offsets=arg_offsets)


def read_globals(path: Path | str) -> list[Global]:
    """`<name>.globals` (RecordReplayTy::dumpGlobals): per global, its name and a NUL,
    a u32 size, its bytes, to the end of the file."""
    path = Path(path)
    data = read_file(path, error=OmpRecordError)
    out, pos, seen = [], 0, set()
    while pos < len(data):
        start = pos
        end = data.find(b"\0", pos)
        if end < 0:
            raise OmpRecordError(f"{path}: byte {pos}: global #{len(out)}'s name has no terminating NUL")
        try:
            name = data[pos:end].decode()
        except UnicodeDecodeError:
            raise OmpRecordError(f"{path}: byte {pos}: global #{len(out)}'s name is not UTF-8") from None
        if not name:
            raise OmpRecordError(f"{path}: byte {pos}: global #{len(out)} has an empty name")
        pos = end + 1
        if len(data) - pos < 4:
            raise OmpRecordError(f"{path}: byte {pos}: truncated: global {name!r}'s size needs 4 bytes, "
                                 f"{len(data) - pos} remain")
        size = int.from_bytes(data[pos:pos + 4], "little")
        if size == 0:  # dumpGlobals skips the globals of size 0
            raise OmpRecordError(f"{path}: byte {pos}: global {name!r} has size 0 (LLVM writes none such)")
        pos += 4
        if size > len(data) - pos:
            raise OmpRecordError(f"{path}: byte {pos}: truncated: global {name!r} is {size} bytes, "
                                 f"{len(data) - pos} remain")
        if name in seen:
            raise OmpRecordError(f"{path}: byte {start}: global {name!r} appears twice")
        seen.add(name)
        out.append(Global(name, data[pos:pos + size], start))
        pos += size
    return out


_EM_X86_64, _EM_AARCH64, _EM_PPC64, _EM_CUDA, _EM_AMDGPU = 62, 183, 21, 190, 224
_HOST_MACHINES = {_EM_X86_64: "x86_64", _EM_AARCH64: "aarch64", _EM_PPC64: "ppc64", 243: "riscv64", 258: "loongarch64"}


def read_image(path: Path | str) -> Image:
    """`<name>.image` (RecordReplayTy::saveImage): what kind of code it is, by its magic
    and, for an ELF, its e_machine."""
    from kir.record import MAX_CHUNK_BYTES
    path = Path(path)
    data = read_file(path, cap=MAX_CHUNK_BYTES, error=OmpRecordError)  # the image becomes a record's code chunk
    if data[:4] in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):  # raw bitcode, or its wrapper
        match = re.search(rb'"target-cpu"="([A-Za-z0-9_:+-]+)"', data)
        return Image("ir", match.group(1).decode() if match else "", data, "LLVM bitcode")
    if data[:4] != b"\x7fELF":
        raise OmpRecordError(f"{path}: byte 0: not a device image (an ELF or LLVM bitcode; first bytes: "
                             f"{data[:4].hex(' ')})")
    if len(data) < 20 or data[4] != 2 or data[5] != 1:
        raise OmpRecordError(f"{path}: byte 4: not a 64-bit little-endian ELF (what libomptarget's plugins load)")
    machine = int.from_bytes(data[18:20], "little")
    try:
        if machine == _EM_CUDA:
            return Image("cubin", _core.cubin_arch(data), data, "cubin")
        if machine == _EM_AMDGPU:
            return Image("code-object", _core.parse_code_object(data).target, data, "AMDGPU code object")
    except KirError as error:
        raise OmpRecordError(f"{path}: {error}") from None
    if machine in _HOST_MACHINES:
        return Image("host", _HOST_MACHINES[machine], data, f"{_HOST_MACHINES[machine]} ELF (the host plugin's)")
    raise OmpRecordError(f"{path}: byte 18: ELF machine {machine} is none of libomptarget's plugins' "
                         "(CUDA 190, AMDGPU 224, a host's)")


def _slot_addresses(ptrs: list[int]) -> bool:
    """Whether `ArgPtrs` are the addresses of consecutive 8-byte slots: LLVM 20-22's
    saveKernelDescr writes `LaunchParams.Ptrs[I]`, which GenericKernelTy::prepareArgs
    sets to `&Args[I]` (the host array holding the values); LLVM 19's prepareArgs kept
    the values in `Ptrs` and LLVM after 22 (RecordReplay.cpp, recordDescImpl)
    dereferences the slots again. Two or more arguments 8 bytes apart each are taken as
    slots (values so laid out are not seen in practice); one argument reads as a value."""
    return len(ptrs) >= 2 and all(b - a == 8 for a, b in zip(ptrs, ptrs[1:]))


def read_kernel(descriptor_path: Path | str) -> Kernel:
    """One recorded kernel: `<name>.json` and the files saveImage, saveKernelInput and
    saveKernelOutputInfo wrote beside it."""
    d = read_descriptor(descriptor_path)
    folder = d.path.parent
    files = {suffix: folder / (d.name + suffix) for suffix in _SUFFIXES}
    for suffix in (".image", ".globals", ".memory"):
        if not files[suffix].exists():
            raise OmpRecordError(f"{files[suffix]}: missing (LLVM writes it with {d.path.name})")
    image = read_image(files[".image"])
    globals_ = read_globals(files[".globals"])
    memory = read_file(files[".memory"], error=OmpRecordError)
    if len(memory) != d.memory_size:
        raise OmpRecordError(f"{files['.memory']}: {len(memory)} bytes, {d.path.name} says DeviceMemorySize "
                             f"{d.memory_size}")
    output = None
    if files[".original.output"].exists():
        output = read_file(files[".original.output"], error=OmpRecordError)
        if len(output) != len(memory):
            raise OmpRecordError(f"{files['.original.output']}: {len(output)} bytes, the input "
                                 f"({files['.memory'].name}) {len(memory)}: not one region")
    kernel = Kernel(d, image, globals_, memory, output)
    if _slot_addresses(d.arg_ptrs):
        kernel.args = "slot-addresses"
        kernel.warnings.append(
            f"{d.path}: ArgPtrs are {d.num_args} consecutive 8-byte slots ({d.arg_ptrs[0]:#x}...): LLVM 20-22 record "
            "the host addresses of the plugin's argument array, not the arguments (GenericKernelTy::prepareArgs, "
            "saveKernelDescr); the record keeps them as launch.args, and a replay passes them as they are")
    if any(d.arg_offsets):
        kernel.warnings.append(f"{d.path}: ArgOffsets are not all 0 (LLVM writes zeros): kept in {SIDECAR} only")
    if output is None:
        kernel.warnings.append(f"{d.path}: no {d.name}.original.output (recorded without "
                               "LIBOMPTARGET_RR_SAVE_OUTPUT=1): the record's epilogue is its prologue (flagged "
                               f"{EPILOGUE_ASSUMED})")
    return kernel


def find_descriptors(source: Path | str) -> list[Path]:
    """The records in `source`: a `<name>.json` itself, or every `<name>.json` of a folder
    that has a `<name>.image`, `.globals` or `.memory` beside it (the folder the app ran
    in holds other files too), by name."""
    source = Path(source)
    if source.is_file() or (source.suffix == ".json" and not source.is_dir()):
        return [source]
    if not source.is_dir():
        raise OmpRecordError(f"{source}: not a directory or a <kernel>.json (LLVM writes its records into the "
                             "directory the app ran in)")
    names = {p.name for p in source.iterdir()}
    found = sorted(source / n for n in names if n.endswith(".json") and n != SIDECAR
                   and any(n[:-5] + s in names for s in (".image", ".globals", ".memory")))
    if not found:
        raise OmpRecordError(f"{source}: no LLVM OpenMP kernel record here (no <kernel>.json with its .image, "
                             ".globals and .memory: LIBOMPTARGET_RECORD=1)")
    return found


# --- conversion --------------------------------------------------------------------

@dataclass
class Imported:
    kernel: str
    source: str              #: the `<name>.json` read
    record: str              #: the kir record's path ("" when only checked)
    static_hash: str
    image: str               #: what `.image` held
    args: str                #: Kernel.args
    loop_trip_count: int
    device_id: int
    arg_offsets: list[int]
    globals: int
    epilogue: bool           #: whether `.original.output` was there
    warnings: list[str] = field(default_factory=list)
    #: the OpenMP region's build-independent identity (docs/hashing.md), from a device
    #: image; None for an IR image or a host image
    region_identity: str | None = None

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "source": self.source, "record": self.record, "static": self.static_hash,
                "image": self.image, "args": self.args, "loop_trip_count": self.loop_trip_count,
                "device_id": self.device_id, "arg_offsets": self.arg_offsets, "globals": self.globals,
                "epilogue": self.epilogue, "region_identity": self.region_identity}


def _layout(kernel: Kernel) -> tuple[list[int], list[int]]:
    """The parameter layout: the image's where it gives one (a cubin's or code object's
    kernel parameters; their count must be NumArgs), else libomptarget's: NumArgs
    pointer-sized slots (every OpenMP kernel argument is passed as a `void *`,
    GenericKernelTy::prepareArgs)."""
    from kir.replay.planner import PARSERS
    d, image = kernel.descriptor, kernel.image
    n = d.num_args
    if image.kind in PARSERS:
        try:
            k = next((k for k in PARSERS[image.kind](image.data).kernels if k.name == d.name), None)
        except KirError as error:
            raise OmpRecordError(f"{d.path.with_suffix('.image')}: {error}") from None
        if k is None:
            raise OmpRecordError(f"{d.path.parent / (d.name + '.image')}: the {image.what} has no kernel {d.name}")
        params = k.params
        if params is not None and len(params) == n:
            return [p.offset for p in params], [p.size for p in params]
        if params is not None and params:
            raise OmpRecordError(f"{d.path}: NumArgs is {n}, the kernel in {d.name}.image takes {len(params)} "
                                 "parameters")
    return [8 * i for i in range(n)], [8] * n


def static_hash(kernel: Kernel) -> _core.Hash128:
    """kir's static hash of the kernel (docs/hashing.md): over its image as the hook
    hashes it (kir.replay.planner.image_static_hash), over the bitcode (code kind "ir")
    where LLVM saved bitcode, over nothing ("unknown") for the host plugin's image."""
    from kir.replay.planner import image_static_hash
    name, image = kernel.descriptor.name, kernel.image
    if image.kind == "ir":
        return _core.static_hash(name, "ir", [image.data])
    if image.kind == "host":
        return _core.static_hash(name, "unknown", [])
    return image_static_hash(name, image.kind, image.data)


def convert(source: Path | str, output: Path | str, write: bool = True, chunk_size: int = 4 << 20,
            progress=None) -> list[Imported]:
    """Every LLVM kernel record in `source` (a folder, or one `<name>.json`) as a kir
    record in `output`. Everything is read and checked first: nothing is written unless
    all of it converts. `progress(done, total)` as in kir.mneme.convert."""
    kernels = [read_kernel(p) for p in find_descriptors(source)]
    if write:
        Path(output).mkdir(parents=True, exist_ok=True)
    out = []
    for i, kernel in enumerate(kernels):
        if progress is not None:
            progress(i, len(kernels))
        out.append(_convert_one(kernel, output if write else None, chunk_size))
    if write:
        _write_sidecar(Path(output), out)
    return out


def _convert_one(kernel: Kernel, output: Path | str | None, chunk_size: int) -> Imported:
    d, image = kernel.descriptor, kernel.image
    offsets, sizes = _layout(kernel)
    static = static_hash(kernel)
    args = [p.to_bytes(8, "little")[:s] if s <= 8 else p.to_bytes(8, "little") + bytes(s - 8)
            for p, s in zip(d.arg_ptrs, sizes)]
    done = Imported(d.name, str(d.path), "", static.hex, image.what, kernel.args, d.loop_trip_count, d.device_id,
                    d.arg_offsets, len(kernel.globals), kernel.output is not None, list(kernel.warnings))
    # The region's identity (docs/hashing.md, "OpenMP target regions"), hashed from the device
    # image libomptarget recorded (a cubin's or code object's own sections of the kernel), as
    # `kir hash` gives it for the app's image: the same region in every build. An IR image's
    # needs llvmlite (kir.hashing.omp_regions); left null here.
    if image.kind in ("cubin", "code-object"):
        identity = _core.omp_region_identity_of_image(d.name, image.kind, image.data)
        done.region_identity = identity.hex if identity is not None else None
    if image.kind == "host":
        done.warnings.append(f"{d.path.parent / (d.name + '.image')}: an {image.what}: kept out of the record "
                             "(kir replays GPU code)")
    if output is None:
        return done
    grid, block = (d.num_teams, 1, 1), (d.thread_limit, 1, 1)
    arch = image.arch if image.kind != "host" else ""
    b = _core.RecordBuilder(str(output), chunk_size=chunk_size)
    b.set_process(0, -1)  # LLVM records neither
    b.set_device("", arch, d.device_id)
    b.set_kernel(d.name, d.name, static, offsets, sizes)
    if image.kind == "ir":
        b.set_ir(image.data)
    elif image.kind != "host":
        b.set_image(image.kind, image.arch, image.data)
    identity = hashing.launch_identity(static.hex, arch, args, grid=grid, block=block, shared_bytes=0)
    b.set_launch(LAUNCH_API, _core.Hash128.from_hex(identity), grid, block, 0, 0, args, 0)
    b.set_va_range(d.va_start, d.memory_size)
    # A region is stored with both snapshots (the record format's rule); what LLVM did not
    # save after the kernel gets its prologue as its epilogue, flagged EPILOGUE_ASSUMED.
    if d.memory_size:
        region = b.add_allocation(d.va_start, d.memory_size, "device", True)
        b.snapshot(region, False, kernel.memory)
        b.snapshot(region, True, kernel.memory if kernel.output is None else kernel.output)
        if kernel.output is None:
            b.add_flag(EPILOGUE_ASSUMED, f"the allocation at {d.va_start:#x}: recorded without "
                                         "LIBOMPTARGET_RR_SAVE_OUTPUT (no .original.output)")
    for g in kernel.globals:  # dumpGlobals keeps no address: 0, the replay finds a global by name
        region = b.add_global(g.name, 0, len(g.data))
        b.snapshot(region, False, g.data)
        b.snapshot(region, True, g.data)
    if kernel.args == "slot-addresses":  # kir's flag for an argument pointing into host memory
        b.add_flag("host-pointer", "the arguments are LLVM 20-22's ArgPtrs: the host addresses of libomptarget's "
                                   "argument slots (GenericKernelTy::prepareArgs), not the arguments")
    if kernel.globals:
        b.add_flag(EPILOGUE_ASSUMED, f"the globals {', '.join(g.name for g in kernel.globals)}: LLVM records "
                                     "globals before the kernel only (dumpGlobals)")
    done.record = b.write()
    return done


def imported(output: Path | str) -> dict[str, dict]:
    """What `convert` kept beside the records of `output`: record file name ->
    Imported.to_json (without `record`); {} when nothing was imported there."""
    return read_sidecar(Path(output) / SIDECAR, OmpRecordError)


def _write_sidecar(output: Path, items: list[Imported]) -> None:
    write_sidecar(output / SIDECAR, "kir.omp-import/1", [item.to_json() for item in items], OmpRecordError)


__all__ = ["ALIGNMENT", "convert", "Descriptor", "EPILOGUE_ASSUMED", "find_descriptors", "Global", "Image", "Imported",
           "imported", "Kernel", "LAUNCH_API", "read_descriptor", "read_globals", "read_image", "read_kernel",
           "SIDECAR", "static_hash"]
