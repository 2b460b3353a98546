"""Read a Mneme recording and convert it into kir records (`kir import-mneme`).

Mneme (github.com/Olympus-HPC/Mneme, read at 4442a49) writes, flat in one folder
(docs/mneme.md has the full mapping):

- `<static>.json`, one per kernel: `KernelInstancesCollection::toJSON` and
  `RecordDatabase::writeKernelJSON` (include/mneme/MnemeSnapshot.hpp), printed by
  llvm::json (compact, keys sorted): `StaticHash` (Proteus's u64), `KernelName`,
  `DemangledName`, `VAddr` (the reserved range's base, "0x" + 16 hex digits,
  `util::pointerToHexString`), `VASize`, `Modules` (`RecordedIR_<static>.bc`),
  `ArgNames`, `Specializations`, `BinaryBlobs`, `instances` keyed by the decimal
  dynamic hash: `GridDims`/`BlockDims` ({x, y, z}), `SharedMem`, `Prologue`,
  `Epilogue` (file names), `Args` (always empty), `Occurrences`.
- `RecordedIR_<static>.bc`: the kernel's module as Proteus held it
  (`KernelInstancesCollection::StoreModuleBytes`).
- `DeviceState.prologue.<static>.<dynamic>.mneme`: a "bytes" snapshot,
  `MnemeSnapshot::takeMnemeBytesSnapshot`: u64 global count; per global (u64 name
  length, name, u64 size, u64 device address, the bytes); u64 blob count; per
  allocation (`operator<<(raw_ostream&, const MnemeMemoryBlob&)`, MnemeMemory.hpp:
  u64 reserved size, u64 size, u64 device address, the bytes, then the annotation
  metadata, `metadata::serialize` in src/MnemeAnnotationInternal.cpp: u8 dtype,
  f64 threshold, u8 threshold kind, u8 norm, u64 tag length, tag); u64 argument
  count; per argument (u64 size, the bytes). Host-endian (little-endian on every
  machine Mneme runs on), size_t and pointers 8 bytes, no magic, no checksum.
- `DeviceState.epilogue.<static>.<dynamic>.mneme`: the same bytes format
  (`--epilogue-format bytes`), or a diff against the prologue
  (`MnemeSnapshot::writeMnemeDiffSnapshot`, the default): magic `MNEME_DIFF_V1`;
  u64 global count; per global (u64 name length, name, u64 size, u64 address, u64
  range count, ranges); u64 blob count; per allocation (u64 reserved size, u64
  size, u64 address, metadata, u64 range count, ranges); a range is (u64 offset,
  u64 length, the bytes) (`writeChangedRanges`). `--epilogue-format best` writes
  either, per instance; the reader tells them apart by the magic
  (`MnemeSnapshot::openSnapshot`), as this one does.

Nothing here trusts a size before checking it against the file: a malformed file
is a `MnemeError` naming the file and the byte offset of the bad field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kir import _core, hashing
from kir.errors import KirError, MnemeError
from kir.files import load_json, read_file, read_sidecar, write_sidecar
from kir.model import ArgType, JitArg, JitArgKind

DIFF_MAGIC = b"MNEME_DIFF_V1"  # MnemeSnapshot::DiffMagic
#: Mneme's interposed launch entry point (MnemeRecordingBackend.hpp: rtLaunchKernel,
#: reached through Proteus's __proteus_launch_kernel).
LAUNCH_API = "__proteus_launch_kernel"
_JSON_NAME = re.compile(r"^(\d+)\.json$")


@dataclass
class Annotation:
    """A blob's annotation metadata (mneme::Metadata, MnemeAnnotation.hpp)."""
    builtin: int = 0
    threshold: float = 0.0
    threshold_kind: int = 0
    norm: int = 0
    tag: bytes = b""

    @property
    def is_default(self) -> bool:
        return self.threshold == 0.0 and self.norm == 0 and not self.tag

    def to_json(self, address: int) -> dict:
        """As `kir import-mneme` keeps it (docs/mneme.md): the names of Mneme's enums
        (BuiltinDType, ThresholdKind, Norm in include/mneme/MnemeAnnotation.hpp)."""
        def name(table, value):
            return table[value] if value < len(table) else value
        return {"address": address, "dtype": name(_DTYPES, self.builtin), "threshold": self.threshold,
                "threshold_kind": name(_THRESHOLD_KINDS, self.threshold_kind), "norm": name(_NORMS, self.norm),
                "tag": self.tag.decode("utf-8", "backslashreplace")}


_DTYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "f32", "f64")  # BuiltinDType
_THRESHOLD_KINDS = ("absolute", "relative")                                          # ThresholdKind
_NORMS = ("none", "l1", "l2", "linf")                                                  # Norm
#: BuiltinDType -> the record's tolerance dtype (kir/record/metadata.hpp, tolerance::kDtypes:
#: floating point only; an integer buffer is compared bitwise)
_RECORD_DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64"}


def record_tolerance(a: Annotation) -> tuple[dict | None, str | None]:
    """A Mneme annotation as the record's tolerance (RecordBuilder.set_tolerance's
    fields: dtype, kind, threshold, norm, tag), and what the mapping does not keep
    (None when exact). Mneme's comparison (src/MnemeDeviceCode.cpp,
    compare_builtin_kernel; docs/usage/verification.md): a per-element error, `|r - e|`
    (Absolute) or `|r - e| / |e|` (Relative), each against the threshold (Norm::None)
    or aggregated by L1, L2 or Linf. kir's `abs` is norm(r - e) <= threshold, the same
    for Absolute (Norm::None is Linf); kir's `rel` is norm(r - e) <= threshold *
    norm(recorded), not a per-element relative error. (None, why) when kir cannot hold
    it: an integer dtype, an enum value Mneme does not define, a threshold out of range."""
    doc = a.to_json(0)
    dtype, kind, norm = doc["dtype"], doc["threshold_kind"], doc["norm"]
    if dtype not in _RECORD_DTYPES:
        return None, (f"its dtype {dtype} is not floating point (kir's tolerances compare float16, float32 and "
                      "float64): verified bitwise")
    if kind not in _THRESHOLD_KINDS or norm not in _NORMS:
        return None, f"threshold kind {kind} or norm {norm} is not Mneme's: verified bitwise"
    if not 0 <= a.threshold <= 1e300:
        return None, f"threshold {a.threshold} is not a bound (0 to 1e300): verified bitwise"
    out = {"dtype": _RECORD_DTYPES[dtype], "kind": "abs" if kind == "absolute" else "rel", "threshold": a.threshold,
           "norm": "linf" if norm == "none" else norm, "tag": doc["tag"]}
    if kind == "relative":
        return out, (f"Mneme's relative error is per element, {norm} of |r - e| / |e| <= {a.threshold}; kir's rel "
                     f"bounds {out['norm']}(r - e) by {a.threshold} * {out['norm']}(recorded), which may accept what "
                     "Mneme refuses")
    return out, None


@dataclass
class Region:
    """A global (name set) or an allocation (reserved size set), with its bytes."""
    address: int
    size: int
    data: bytes | bytearray
    name: str = ""
    reserved: int = 0
    annotation: Annotation | None = None


@dataclass
class Snapshot:
    """One Mneme device-state file (`DeviceState.prologue|epilogue.*.mneme`) as read:
    its globals and allocations (blobs, by address), each a Region with its bytes."""
    path: Path
    format: str                                   #: "bytes" or "diff"
    globals: dict[str, Region] = field(default_factory=dict)
    blobs: dict[int, Region] = field(default_factory=dict)
    args: list[bytes] | None = None               #: None in a diff (it holds none)


@dataclass
class Instance:
    """One entry of a kernel's `instances` in `<static>.json`: a launch configuration
    Mneme recorded, with its snapshots' file names."""
    dynamic_hash: str       #: Mneme's, decimal (computeHash: grid, block, shared memory)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    prologue: str
    epilogue: str
    occurrences: int


@dataclass
class Kernel:
    """One `<static>.json`."""
    path: Path
    static_hash: int        #: Proteus's 64-bit static hash
    name: str
    demangled: str
    modules: list[str]
    va_base: int
    va_size: int
    arg_names: list[str]
    instances: list[Instance]
    #: per IR argument, whether Mneme may specialize it (`Specializations`,
    #: mneme::canSpecialize in include/mneme/MnemeLLVMUtils.hpp: the integer and
    #: floating-point scalars); empty when the file has none
    specializations: list[bool] = field(default_factory=list)


class _Cursor:
    """Reads little-endian fields of a snapshot, checking each against what remains."""

    def __init__(self, path: Path, data: bytes):
        self.path, self.data, self.pos = path, memoryview(data), 0

    def fail(self, message: str, at: int | None = None) -> MnemeError:
        return MnemeError(f"{self.path}: byte {self.pos if at is None else at}: {message}")

    def take(self, n: int, what: str) -> memoryview:
        left = len(self.data) - self.pos
        if n > left:
            raise self.fail(f"truncated: {what} needs {n} bytes, {left} remain")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u64(self, what: str) -> int:
        return int.from_bytes(self.take(8, what), "little")

    def u8(self, what: str) -> int:
        return self.take(1, what)[0]

    def f64(self, what: str) -> float:
        import struct
        return struct.unpack("<d", self.take(8, what))[0]

    def count(self, what: str, each: int) -> int:
        """A count of items each at least `each` bytes: refused when the file cannot hold them."""
        at = self.pos
        n = self.u64(what)
        if n * each > len(self.data) - self.pos:
            raise self.fail(f"{what} is {n}: more than the {len(self.data) - self.pos} bytes left can hold", at)
        return n

    def name(self, what: str) -> str:
        at = self.pos
        n = self.u64(f"{what}'s length")
        raw = bytes(self.take(n, what))
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8", at) from None

    def annotation(self, what: str) -> Annotation:  # metadata::fromBuffer
        a = Annotation(builtin=self.u8(f"{what}'s dtype"), threshold=self.f64(f"{what}'s threshold"),
                       threshold_kind=self.u8(f"{what}'s threshold kind"), norm=self.u8(f"{what}'s norm"))
        a.tag = bytes(self.take(self.u64(f"{what}'s tag length"), f"{what}'s tag"))
        return a


def _read_file(path: Path, cap: int | None = None) -> bytes:
    """A file of the recording: regular, at most `cap` bytes (a snapshot: as large as
    the memory it holds), read without blocking (kir.files)."""
    return read_file(path, cap=cap, error=MnemeError)


def read_snapshot(path: Path | str) -> Snapshot:
    """A "bytes" snapshot (prologue, or an epilogue recorded as bytes)."""
    path = Path(path)
    c = _Cursor(path, _read_file(path))
    if bytes(c.data[:len(DIFF_MAGIC)]) == DIFF_MAGIC:
        raise MnemeError(f"{path}: byte 0: a diff snapshot ({DIFF_MAGIC.decode()}) where a full one "
                         "(the prologue) was expected")
    snap = Snapshot(path, "bytes", args=[])
    for i in range(c.count("the global count", 24)):
        at = c.pos
        name = c.name(f"global #{i}'s name")
        size, address = c.u64(f"global {name!r}'s size"), c.u64(f"global {name!r}'s address")
        if name in snap.globals:
            raise c.fail(f"global {name!r} appears twice", at)
        snap.globals[name] = Region(address, size, c.take(size, f"global {name!r}'s {size} bytes"), name=name)
    for i in range(c.count("the memory blob count", 24 + 19)):
        at = c.pos
        reserved, size, address = (c.u64(f"blob #{i}'s reserved size"), c.u64(f"blob #{i}'s size"),
                                   c.u64(f"blob #{i}'s address"))
        if size > reserved:
            raise c.fail(f"blob #{i} at {address:#x}: size {size} exceeds its reserved size {reserved}", at)
        if address in snap.blobs:
            raise c.fail(f"blob #{i}: a second blob at {address:#x}", at)
        data = c.take(size, f"blob #{i} at {address:#x}: its {size} bytes")
        snap.blobs[address] = Region(address, size, data, reserved=reserved,
                                     annotation=c.annotation(f"blob #{i}"))
    for i in range(c.count("the argument count", 8)):
        size = c.u64(f"argument {i + 1}'s size")
        snap.args.append(bytes(c.take(size, f"argument {i + 1}'s {size} bytes")))
    if c.pos != len(c.data):
        raise c.fail(f"{len(c.data) - c.pos} bytes after the last argument")
    return snap


def read_epilogue(path: Path | str, prologue: Snapshot) -> Snapshot:
    """The epilogue, whole: a bytes snapshot as it is, a diff applied onto `prologue`
    (DiffSnapshotFile::reconstruct)."""
    path = Path(path)
    data = _read_file(path)
    if data[:len(DIFF_MAGIC)] != DIFF_MAGIC:
        snap = read_snapshot(path)
        _same_layout(snap, prologue)
        return snap
    c = _Cursor(path, data)
    c.pos = len(DIFF_MAGIC)
    snap = Snapshot(path, "diff")
    n = c.count("the global count", 32)
    if n != len(prologue.globals):
        raise c.fail(f"the global count is {n}, the prologue has {len(prologue.globals)}", c.pos - 8)
    for i in range(n):
        at = c.pos
        name = c.name(f"global #{i}'s name")
        size, address = c.u64(f"global {name!r}'s size"), c.u64(f"global {name!r}'s address")
        base = prologue.globals.get(name)
        if base is None:
            raise c.fail(f"global {name!r} is not in the prologue", at)
        if base.size != size:
            raise c.fail(f"global {name!r} is {size} bytes, {base.size} in the prologue", at)
        region = Region(address, size, bytearray(base.data), name=name)
        _apply_ranges(c, region, f"global {name!r}")
        snap.globals[name] = region
    n = c.count("the memory blob count", 24 + 19 + 8)
    if n != len(prologue.blobs):
        raise c.fail(f"the memory blob count is {n}, the prologue has {len(prologue.blobs)}", c.pos - 8)
    for i in range(n):
        at = c.pos
        reserved, size, address = (c.u64(f"blob #{i}'s reserved size"), c.u64(f"blob #{i}'s size"),
                                   c.u64(f"blob #{i}'s address"))
        base = prologue.blobs.get(address)
        if base is None:
            raise c.fail(f"blob #{i} at {address:#x} is not in the prologue", at)
        if (base.reserved, base.size) != (reserved, size):
            raise c.fail(f"blob #{i} at {address:#x}: sizes {size}/{reserved} (size/reserved), "
                         f"{base.size}/{base.reserved} in the prologue", at)
        region = Region(address, size, bytearray(base.data), reserved=reserved,
                        annotation=c.annotation(f"blob #{i}"))
        _apply_ranges(c, region, f"blob #{i} at {address:#x}")
        snap.blobs[address] = region
    if c.pos != len(c.data):
        raise c.fail(f"{len(c.data) - c.pos} bytes after the last blob")
    return snap


def _apply_ranges(c: _Cursor, region: Region, what: str) -> None:  # MnemeSnapshot::applyDiffRanges
    for r in range(c.count(f"{what}'s range count", 16)):
        at = c.pos
        offset, length = c.u64(f"{what}: range #{r}'s offset"), c.u64(f"{what}: range #{r}'s length")
        if offset > region.size or length > region.size - offset:
            raise c.fail(f"{what}: range #{r} ({offset}, {length} bytes) runs past its {region.size} bytes", at)
        region.data[offset:offset + length] = c.take(length, f"{what}: range #{r}'s {length} bytes")


def _same_layout(epilogue: Snapshot, prologue: Snapshot) -> None:
    """A bytes epilogue must describe the regions the prologue does (Mneme writes both from one map)."""
    for name, g in prologue.globals.items():
        e = epilogue.globals.get(name)
        if e is None or e.size != g.size:
            raise MnemeError(f"{epilogue.path}: global {name!r} is missing or differs in size from the prologue")
    for address, b in prologue.blobs.items():
        e = epilogue.blobs.get(address)
        if e is None or e.size != b.size:
            raise MnemeError(f"{epilogue.path}: the blob at {address:#x} is missing or differs in size "
                             "from the prologue")
    if len(epilogue.globals) != len(prologue.globals) or len(epilogue.blobs) != len(prologue.blobs):
        raise MnemeError(f"{epilogue.path}: holds regions the prologue does not")


# --- the JSON database -------------------------------------------------------------

def _field(obj: dict, key: str, kinds, where: str, path: Path):
    if not isinstance(obj, dict):
        raise MnemeError(f"{path}: {where or 'the top level'}: expected an object")
    if key not in obj:
        raise MnemeError(f"{path}: {where + ': ' if where else ''}missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
        raise MnemeError(f"{path}: {where + '.' if where else ''}{key}: expected "
                         f"{'/'.join(k.__name__ for k in _tuple(kinds))}, found {type(value).__name__}")
    return value


def _tuple(kinds) -> tuple:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _uint(obj, key, where, path, bits=64, low=0) -> int:
    value = _field(obj, key, int, where, path)
    if not low <= value < 1 << bits:
        raise MnemeError(f"{path}: {where + '.' if where else ''}{key}: {value} is out of range "
                         f"({low} to 2^{bits}-1)")
    return value


def _file_name(obj, key, where, path) -> str:
    name = _field(obj, key, str, where, path)
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise MnemeError(f"{path}: {where + '.' if where else ''}{key}: {name!r} is not a file name in "
                         "the recording's folder")
    return name


def read_database(path: Path | str) -> Kernel:
    """One `<static>.json` (KernelInstancesCollection::toJSON)."""
    path = Path(path)
    doc = load_json(path, error=MnemeError)
    if not isinstance(doc, dict):
        raise MnemeError(f"{path}: expected a JSON object")
    static = _uint(doc, "StaticHash", "", path)
    va_text = _field(doc, "VAddr", str, "", path)
    if not re.fullmatch(r"0x[0-9a-fA-F]{1,16}", va_text):
        raise MnemeError(f"{path}: VAddr: {va_text!r} is not a hex address")
    va_base, va_size = int(va_text, 16), _uint(doc, "VASize", "", path)
    if va_base + va_size > 1 << 64:
        raise MnemeError(f"{path}: VAddr {va_text} + VASize {va_size} runs past the 64-bit address space")
    modules = _field(doc, "Modules", list, "", path)
    if len(modules) != 1:
        raise MnemeError(f"{path}: Modules: {len(modules)} modules; Mneme records exactly one "
                         "(KernelInstancesCollection stores the kernel's module once)")
    module = _file_name({"Modules[0]": modules[0]}, "Modules[0]", "", path)
    names = _field(doc, "ArgNames", list, "", path) if "ArgNames" in doc else []
    flags = _field(doc, "Specializations", list, "", path) if "Specializations" in doc else []
    for i, flag in enumerate(flags):
        if not isinstance(flag, bool):
            raise MnemeError(f"{path}: Specializations[{i}]: expected bool, found {type(flag).__name__}")
    kernel = Kernel(path=path, static_hash=static, name=_field(doc, "KernelName", str, "", path),
                    demangled=_field(doc, "DemangledName", str, "", path), modules=[module],
                    va_base=va_base, va_size=va_size, arg_names=[str(n) for n in names], instances=[],
                    specializations=list(flags))
    instances = _field(doc, "instances", dict, "", path)
    for key, inst in instances.items():
        where = f"instances[{key!r}]"
        if not re.fullmatch(r"\d{1,20}", key) or int(key) >> 64:
            raise MnemeError(f"{path}: {where}: the key is not a decimal 64-bit dynamic hash")
        dims = []
        for which in ("GridDims", "BlockDims"):
            d = _field(inst, which, dict, where, path)
            dims.append(tuple(_uint(d, axis, f"{where}.{which}", path, bits=32, low=1) for axis in "xyz"))
        kernel.instances.append(Instance(
            dynamic_hash=key, grid=dims[0], block=dims[1],
            shared_bytes=_uint(inst, "SharedMem", where, path, bits=32),
            prologue=_file_name(inst, "Prologue", where, path),
            epilogue=_file_name(inst, "Epilogue", where, path),
            occurrences=_uint(inst, "Occurrences", where, path) if "Occurrences" in inst else 1))
    return kernel


def find_databases(directory: Path | str) -> list[Path]:
    """The `<static>.json` files of a Mneme recording folder, by static hash."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MnemeError(f"{directory}: not a directory (a Mneme recording is a folder)")
    found = sorted((p for p in directory.iterdir() if _JSON_NAME.match(p.name)),
                   key=lambda p: int(_JSON_NAME.match(p.name).group(1)))
    if not found:
        raise MnemeError(f"{directory}: no Mneme recording here (no <static-hash>.json)")
    return found


# --- the kernel's code -------------------------------------------------------------

@dataclass
class KernelCode:
    """A kernel's code for its kir records (`kernel_code`): Mneme's recorded IR module,
    its arch, kir's static hash over it and the parameters' layout."""
    ir: bytes
    arch: str
    static_hash: _core.Hash128
    offsets: list[int]
    sizes: list[int]
    #: the runtime-constant arguments (kernel.jit_args): Mneme's `Specializations`
    jit_args: list[JitArg] = field(default_factory=list)


#: an IR scalar's type -> kir's argument type (the scalars mneme::canSpecialize accepts;
#: x86_fp80/fp128/ppc_fp128 have no kir type and cannot occur in device code)
_IR_SCALARS = {"i1": ArgType.bool, "i8": ArgType.i8, "i32": ArgType.i32, "i64": ArgType.i64,
               "float": ArgType.f32, "double": ArgType.f64}


def _jit_args(kernel: Kernel, fn, path: Path) -> list[JitArg]:
    """Mneme's `Specializations` (one flag per IR argument) as kir's runtime-constant
    arguments: each flagged argument a scalar of its IR type."""
    flags = kernel.specializations
    if not flags:
        return []
    if len(flags) != len(fn.params):
        raise MnemeError(f"{kernel.path}: Specializations has {len(flags)} flags, {kernel.name} takes "
                         f"{len(fn.params)} arguments ({path.name})")
    out = []
    for i, (flag, param) in enumerate(zip(flags, fn.params)):
        if not flag:
            continue
        kind = _IR_SCALARS.get(param.type)
        if kind is None:
            raise MnemeError(f"{kernel.path}: Specializations[{i}]: argument {i + 1} is {param.type}, "
                             "not a scalar kir can specialize")
        out.append(JitArg(i + 1, JitArgKind.scalar, kind))
    return out


def kernel_code(kernel: Kernel) -> KernelCode:
    """The IR, kir's static hash over it (docs/hashing.md, code kind "ir"), the
    architecture it targets, and the kernel's parameter layout: the IR compiled to PTX
    (as `kir replay --code ir` does), whose `.param` list gives offsets and sizes."""
    import kir.jit
    from kir.ir import read_module
    from kir.record import MAX_CHUNK_BYTES

    path = kernel.path.parent / kernel.modules[0]
    ir = _read_file(path, MAX_CHUNK_BYTES)  # the IR becomes a record's code chunk
    module = read_module(ir, source=str(path))
    if module.error:
        raise MnemeError(f"{path}: {module.error}")
    fn = module.function(kernel.name)
    if fn is None or fn.is_declaration:
        raise MnemeError(f"{path}: the module does not define the kernel {kernel.name} "
                         f"(named by {kernel.path.name})")
    match = re.search(r'"target-cpu"="(sm_\d+[af]?)"', module.text())
    arch = match.group(1) if match else "sm_90"
    try:
        ptx = kir.jit.compile(ir, kernel.name, arch, options={"kind": "ptx"}).code
    except KirError as error:
        raise MnemeError(f"{path}: {error}") from None
    ptx_kernel = next((k for k in _core.parse_ptx(ptx).kernels if k.name == kernel.name), None)
    if ptx_kernel is None:
        raise MnemeError(f"{path}: the kernel {kernel.name} compiled to PTX has no entry of that name")
    params = ptx_kernel.params
    if len(params) != len(fn.params):
        raise MnemeError(f"{path}: {kernel.name}: {len(fn.params)} IR parameters, {len(params)} in its PTX")
    return KernelCode(ir=ir, arch=arch, static_hash=_core.static_hash(kernel.name, "ir", [ir]),
                      offsets=[p.offset for p in params], sizes=[p.size for p in params],
                      jit_args=_jit_args(kernel, fn, path))


# --- the app's own code (`kir import-mneme --app`) ---------------------------------

@dataclass
class AppCode:
    """A kernel as the app launches it: the image kir's hook would pick for it and the
    static hash the hook computes over that image (docs/hashing.md: the IR embedded
    in it, else the image)."""
    app: str
    static_hash: _core.Hash128
    image_kind: str          #: "cubin", "ptx", "code-object"
    image_arch: str          #: the arch the hook keys the launch with ("sm_90", "gfx90a")
    image: bytes
    source: str              #: what was hashed ("IR _jit_bitcode_… in cubin image #3")


def _fitness(image, kind: str, want: str) -> int:
    """How well an image of the app suits a device of architecture `want` (the
    record's): libkir/hook/image_choice.cpp, suitability (CUDA: the device's own
    cubin, then a cubin of the same major and lower minor, then PTX not above it;
    the newest of each first) and, with no device to match, its fallback (a cubin
    over PTX, the highest architecture first); AMDGPU: the code object of the
    record's processor first."""
    target = image.entry.arch if image.entry is not None else image.target
    if kind == "code-object":
        return 2 if target.split(":")[0] == want.split(":")[0] else 1
    m, w = re.fullmatch(r"sm_(\d+)[af]?", target), re.fullmatch(r"sm_(\d+)[af]?", want)
    if m is None:
        return 0
    arch, cc = int(m.group(1)), int(w.group(1)) if w else 0
    if kind == "cubin" and arch == cc:
        return 30000
    if kind == "cubin" and arch // 10 == cc // 10 and arch < cc:
        return 20000 + arch
    if kind == "ptx" and arch <= cc:
        return 10000 + arch
    return (1000 if kind == "cubin" else 0) + arch  # what no device would load: below every fit


def find_in_app(app: Path | str, kernels: list[tuple[str, str]]) -> tuple[dict[str, AppCode], dict[str, str]]:
    """Each (kernel name, record arch) of `kernels` in the binary `app`, as kir finds and
    hashes kernels (kir.hashing.kernel_hashes: `kir hash APP`): {name: AppCode} for
    those found, {name: why not} for the others (absent from the app's device code,
    or in images whose best choices hash differently)."""
    from kir.binary import Binary
    from kir.hashing import kernel_hashes

    names = {name for name, _ in kernels}
    try:
        binary = Binary.open(str(app))
    except (KirError, OSError) as error:
        raise MnemeError(f"--app: {error}") from None  # the error names the file
    found, missing = {}, {}
    with binary:
        hashes, errors = kernel_hashes(binary, name_filter=names.__contains__)
        images = binary.images
        for name, arch in kernels:
            if name in found or name in missing:
                continue
            candidates = [h for h in hashes if h.kernel == name]
            if not candidates:
                undecoded = f" ({len(errors)} of its images could not be read: {errors[0]})" if errors else ""
                missing[name] = f"{app}: no kernel {name} in its device code{undecoded}"
                continue
            fits = [_fitness(images[h.image], _kind(h.image_kind), arch) for h in candidates]
            best = [h for h, fit in zip(candidates, fits) if fit == max(fits)]
            if len({h.static_hash for h in best}) > 1:
                missing[name] = (f"{app}: {name} is in {len(best)} images that suit {arch} equally and hash "
                                 f"differently ({', '.join(f'{h.source}: {h.static_hash}' for h in best)})")
                continue
            h, image = best[0], images[best[0].image]
            target = image.entry.arch if image.entry is not None else image.target
            found[name] = AppCode(str(app), _core.Hash128.from_hex(h.static_hash), _kind(h.image_kind), target,
                                  image.read(), h.source)
    return found, missing


def _kind(image_kind) -> str:
    """An ImageKind as records name it ("cubin", "ptx", "code-object": kir.model)."""
    return str(image_kind)


# --- conversion --------------------------------------------------------------------

@dataclass
class Imported:
    """What `convert` made of one Mneme instance: the kir record written (or checked)
    and what the conversion noted."""
    kernel: str
    mneme_static: int
    mneme_dynamic: str
    record: str              #: the kir record's path ("" when only checked)
    regions: int
    warnings: list[str] = field(default_factory=list)
    occurrences: int = 1     #: Mneme's `Occurrences`: launches of this instance the app made
    #: the blobs' annotations that set a tolerance (Annotation.to_json each)
    tolerances: list[dict] = field(default_factory=list)
    jit_args: list[int] = field(default_factory=list)  #: 1-based positions (Mneme's `Specializations`)
    static_hash: str = ""    #: the record's (32 hex digits): the app's with --app, where found
    module_static_hash: str = ""  #: kir's static hash over Mneme's RecordedIR module
    app: str | None = None   #: --app, where the kernel was found in it
    app_image: str | None = None  #: what of the app was hashed (kir.hashing.KernelHash.source)

    def to_json(self) -> dict:
        """One of `kir import-mneme --json`'s `records`; the sidecar (SIDECAR) keeps it by the
        record's file name, without `record`."""
        return {"kernel": self.kernel, "mneme_static_hash": self.mneme_static,
                "mneme_dynamic_hash": self.mneme_dynamic, "record": self.record, "regions": self.regions,
                "occurrences": self.occurrences, "jit_args": self.jit_args, "tolerances": self.tolerances,
                "static": self.static_hash, "module_static": self.module_static_hash, "app": self.app,
                "app_image": self.app_image}


#: the file `convert` keeps, in the output folder, what kir records have no field for
#: (Mneme's `Occurrences` and tolerances), by record file name (docs/mneme.md)
SIDECAR = "mneme-import.json"


def imported(output: Path | str) -> dict[str, dict]:
    """What `convert` kept beside the records of `output`: record file name ->
    Imported.to_json (without `record`); {} when nothing was imported there."""
    return read_sidecar(Path(output) / SIDECAR, MnemeError)


def _check_args(kernel: Kernel, code: KernelCode, snap: Snapshot) -> None:
    args = snap.args or []
    if len(args) != len(code.sizes):
        raise MnemeError(f"{snap.path}: {len(args)} kernel arguments, {kernel.name} takes {len(code.sizes)}")
    for i, (arg, size) in enumerate(zip(args, code.sizes)):
        if len(arg) != size:
            name = f" ({kernel.arg_names[i]})" if i < len(kernel.arg_names) else ""
            raise MnemeError(f"{snap.path}: argument {i + 1}{name} is {len(arg)} bytes, the kernel's "
                             f"parameter is {size}")


def convert(directory: Path | str, output: Path | str, write: bool = True,
            chunk_size: int = 4 << 20, progress=None, app: Path | str | None = None) -> list[Imported]:
    """Every instance of every kernel of the Mneme recording in `directory`, as kir
    records in `output`. The whole recording is read and checked first: nothing is
    written unless all of it converts. `progress(done, total)` is called before each
    instance is checked and written (kir.progress.Progress).

    `app`: the binary Mneme recorded. Each kernel is looked up in it by name
    (`find_in_app`) and its records take the static hash kir's hook computes for the
    app's launches, and the app's image (so a tuned result is stored under the key the
    running app computes); a kernel the app lacks keeps the hash over Mneme's module,
    with a warning."""
    databases = [read_database(p) for p in find_databases(directory)]
    codes = {k.path: kernel_code(k) for k in databases}
    in_app, not_in_app = find_in_app(app, [(k.name, codes[k.path].arch) for k in databases]) if app else ({}, {})
    phases = ("check", "write") if write else ("check",)
    if write:
        Path(output).mkdir(parents=True, exist_ok=True)  # the RecordBuilder makes only the last one
    total, done = len(phases) * sum(len(k.instances) for k in databases), 0
    for phase in phases:
        out = []
        for kernel in databases:
            code = codes[kernel.path]
            for ordinal, inst in enumerate(kernel.instances):
                if progress is not None:
                    progress(done, total)
                    done += 1
                done_one = _convert_one(kernel, code, inst, ordinal, output if phase == "write" else None,
                                        chunk_size, in_app.get(kernel.name))
                if kernel.name in not_in_app:
                    done_one.warnings.append(
                        f"{not_in_app[kernel.name]}: the record of {kernel.path.name}'s instance "
                        f"{inst.dynamic_hash} keeps the static hash of Mneme's module ({code.static_hash}), which "
                        "the app's launches do not compute")
                out.append(done_one)
    if write:
        _write_sidecar(Path(output), out)
    return out


def _write_sidecar(output: Path, items: list[Imported]) -> None:
    write_sidecar(output / SIDECAR, "kir.mneme-import/1", [item.to_json() for item in items], MnemeError)


def _convert_one(kernel: Kernel, code: KernelCode, inst: Instance, ordinal: int,
                 output: Path | str | None, chunk_size: int, app: AppCode | None = None) -> Imported:
    folder = kernel.path.parent
    prologue = read_snapshot(folder / inst.prologue)
    _check_args(kernel, code, prologue)
    epilogue = read_epilogue(folder / inst.epilogue, prologue)
    done = Imported(kernel.name, kernel.static_hash, inst.dynamic_hash, "",
                    len(prologue.blobs) + len(prologue.globals), occurrences=inst.occurrences,
                    jit_args=[a.position for a in code.jit_args],
                    static_hash=str(app.static_hash if app else code.static_hash),
                    module_static_hash=str(code.static_hash), app=app.app if app else None,
                    app_image=app.source if app else None)
    tolerances = {}  # address -> the record's tolerance (the epilogue's copy of the annotation)
    for address, blob in sorted(prologue.blobs.items()):
        a = epilogue.blobs[address].annotation
        if a is not None and not a.is_default:
            done.tolerances.append(a.to_json(address))
            tolerances[address], lost = record_tolerance(a)
            if lost:
                done.warnings.append(f"{epilogue.path}: the blob at {address:#x} carries a Mneme tolerance "
                                     f"({a.to_json(address)['threshold_kind']}, threshold {a.threshold}): {lost} "
                                     f"(Mneme's annotation is kept in {SIDECAR})")
    if output is None:
        return done
    b = _core.RecordBuilder(str(output), chunk_size=chunk_size)
    b.set_process(0, -1)
    b.set_device("", code.arch, 0)  # Mneme records no device; the arch is the IR's target-cpu
    static, arch = (app.static_hash, app.image_arch) if app else (code.static_hash, code.arch)
    b.set_kernel(kernel.name, kernel.demangled, static, code.offsets, code.sizes)
    if app:  # the image the app launches, whose hash this is (the planner recomputes it from the image)
        b.set_image(app.image_kind, app.image_arch, app.image)
    b.set_ir(code.ir)
    if code.jit_args:
        b.set_jit_args([(a.position, "scalar", int(a.type), False, 0, 0, 0) for a in code.jit_args])
    identity = hashing.launch_identity(str(static), arch, prologue.args,
                                       grid=inst.grid, block=inst.block, shared_bytes=inst.shared_bytes)
    b.set_launch(LAUNCH_API, _core.Hash128.from_hex(identity), inst.grid, inst.block, inst.shared_bytes, 0,
                 prologue.args, ordinal)
    b.set_va_range(kernel.va_base, kernel.va_size)
    end = kernel.va_base + kernel.va_size
    for address, blob in sorted(prologue.blobs.items()):
        inside = kernel.va_base <= address and address + blob.size <= end
        region = b.add_allocation(address, blob.size, "device", inside)
        if not inside:
            b.add_flag("outside-va-range", f"the allocation at {address:#x} ({blob.size} bytes) lies outside "
                                           f"Mneme's range {kernel.va_base:#x}+{kernel.va_size:#x}")
        if tolerances.get(address):
            t = tolerances[address]
            b.set_tolerance(region, t["dtype"], t["kind"], t["threshold"], t["norm"], t["tag"])
        b.snapshot(region, False, bytes(blob.data))
        b.snapshot(region, True, bytes(epilogue.blobs[address].data))
    for name, g in sorted(prologue.globals.items()):
        region = b.add_global(name, g.address, g.size)
        b.snapshot(region, False, bytes(g.data))
        b.snapshot(region, True, bytes(epilogue.globals[name].data))
    done.record = b.write()
    return done


__all__ = ["AppCode", "Annotation", "convert", "find_in_app", "DIFF_MAGIC", "find_databases", "Imported", "imported", "Instance", "Kernel",
           "kernel_code", "KernelCode", "LAUNCH_API", "read_database", "read_epilogue", "read_snapshot", "record_tolerance",
           "Region", "SIDECAR", "Snapshot"]
