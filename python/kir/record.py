"""Reading kernel-launch records (docs/record-format.md).

A recording is a directory of records (`records/*.kirrec`, one per recorded
launch) and the content-addressed chunks they point to (`chunks/<h>.kirc`)::

    from kir.record import Recording, Record
    for record in Recording("kir-records").records():
        print(record.kernel.demangled, record.launch.grid, record.launch.block)
        for region in record.allocations:
            before = record.prologue(region)           # bytes, checked against their hashes
            print(hex(region.address), record.changed_ranges(region))

Everything read is checked: magic, version, exact size and XXH3-128 of every
file, the name of every chunk. Anything wrong raises `RecordError`, whose message
names the file, the chunk (if any), the byte offset where it applies and what differs.
The C++ writer lives in `libkir/include/kir/record/`; the layouts (magics,
versions, header fields, codecs, suffixes) are its own description,
`kir/record/format.hpp`, and the metadata's keys its field table,
`kir/record/metadata.hpp`, both read here through `_core.record_format()`: this
module keeps no copy of them, and reads a record's metadata by walking the table
for the record's format version.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from kir import _core
from kir.errors import KirError, RecordError
from kir.files import open_regular, read_exactly
from kir.model import JitArg, Param

__all__ = ["Code", "Device", "Flag", "JitArg", "Kernel", "Launch", "Param", "Process", "Record", "RecordError",
           "Recording", "Region", "Stats", "VaRange", "attach_ir", "check_output_directory", "read_chunk",
           "read_record_body", "record_app"]


class HeaderLayout:
    """A fixed-size header as the C++ writer lays it out (kir/record/format.hpp,
    exported as `_core.record_format()`): its magic, its struct and each field's offset."""

    TYPES = {"u32": "I", "u64": "Q"}

    def __init__(self, description: dict) -> None:
        self.magic: bytes = description["magic"]
        self.size: int = description["size"]
        self.fields: tuple[str, ...] = tuple(name for name, *_ in description["fields"])
        self.offset: dict[str, int] = {name: offset for name, offset, _, _ in description["fields"]}
        self.struct = struct.Struct("<" + "".join(f"{size}s" if kind == "bytes" else self.TYPES[kind]
                                                  for _, _, size, kind in description["fields"]))
        at = 0
        for name, offset, size, _ in description["fields"]:  # packed: the offsets are the struct's
            if offset != at:
                raise RuntimeError(f"kir._core.record_format(): {name} at byte {offset}, not {at}")
            at += size
        if not self.struct.size == self.size == at:
            raise RuntimeError(f"kir._core.record_format(): a {self.size}-byte header of {at} bytes of fields")

    def unpack(self, data: bytes) -> dict[str, int | bytes]:
        return dict(zip(self.fields, self.struct.unpack_from(data)))


FORMAT = _core.record_format()     #: the one description of the format (kir/record/format.hpp)
VERSIONS: tuple[int, ...] = FORMAT["versions"]  #: the format versions this reader knows
METADATA_FORMAT: str = FORMAT["metadata_format"]
RECORD_LAYOUT = HeaderLayout(FORMAT["record_header"])
CHUNK_LAYOUT = HeaderLayout(FORMAT["chunk_header"])
RECORD_MAGIC, CHUNK_MAGIC = RECORD_LAYOUT.magic, CHUNK_LAYOUT.magic
RECORD_HEADER, CHUNK_HEADER = RECORD_LAYOUT.struct, CHUNK_LAYOUT.struct
CODECS: dict[int, str] = FORMAT["codecs"]
RECORD_SUFFIX: str = FORMAT["record_suffix"]
CHUNK_SUFFIX: str = FORMAT["chunk_suffix"]
#: The metadata's field tables (kir/record/metadata.hpp), by name, the record's first:
#: {"doc", "fields": [{key, type, doc, table, low, high, choices, nullable, since, until, first}]}
METADATA_TABLES: dict[str, dict] = FORMAT["metadata"]["tables"]
HEX32 = re.compile(r"[0-9a-f]{32}\Z")

# Caps: every size a file announces is checked against what the file holds and
# against these before anything is allocated (docs/record-format.md, "Reading safely").
MAX_RECORD_BYTES = 256 << 20    #: a record file (header + metadata)
MAX_CHUNK_BYTES = FORMAT["max_chunk_bytes"]  #: a chunk's decoded bytes (and `chunk_size`, and a code's size)
MAX_PARAM_BYTES = FORMAT["metadata"]["max_param_bytes"]  #: the parameter buffer (CUDA: at most 32764 bytes)
# The metadata's msgpack values (maps, lists, keys, elements, scalars): one per 3 bytes
# of body (+65536), at most MAX_METADATA_VALUES. Decoded, a value costs Python up to ~70
# bytes (an empty map: 1 byte, a 75-fold amplification); kir's writer spends more than
# 3 bytes on each (its densest: a kernel's 1-byte parameters, 6 values in 20 bytes each;
# an allocation not snapshotted: 13 in 72; a chunk name: 1 in 34).
MAX_METADATA_VALUES = FORMAT["max_metadata_values"]
MAX_METADATA_DEPTH = FORMAT["max_metadata_depth"]  #: maps and lists nested (kir's writer nests 4 deep)
U32, U64 = 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF


# --- metadata ---------------------------------------------------------------------------

@dataclass
class Process:
    """The recorded process (the record's `process`)."""
    pid: int
    rank: int               #: -1 without MPI


@dataclass
class Device:
    """The device the launch ran on (the record's `device`)."""
    name: str
    arch: str               #: "sm_90"
    ordinal: int


@dataclass
class Code:
    """A device image or IR module stored as one chunk."""
    kind: str               #: "cubin", "ptx" or "ir"
    arch: str               #: "sm_90" ("" for IR)
    chunk: str
    size: int


# Param (a parameter's layout) and JitArg (a runtime-constant argument): kir.model's.


@dataclass
class Kernel:
    """The launched kernel (the record's `kernel`) and the code stored for it."""
    name: str               #: mangled
    demangled: str
    static_hash: str        #: 32 hex digits
    params: list[Param]
    image: Code             #: the image the launch ran
    ptx: Code | None        #: the same fatbin's PTX for the device
    ir: Code | None         #: the LLVM bitcode module embedded for the kernel
    #: relocatable device code (nvcc -rdc=true): the PTX of every unit the kernel's
    #: registration was device-linked from, in link order; empty otherwise
    ptx_units: list[Code] = field(default_factory=list)
    #: the kernel's runtime-constant arguments (kernel.jit_args); empty when the record has none
    jit_args: list[JitArg] = field(default_factory=list)


@dataclass
class Launch:
    """The launch (the record's `launch`): its configuration and argument bytes."""
    api: str
    #: the launch identity the hook computed (docs/hashing.md); None only in version-1
    #: records written before it existed, which carry `dynamic_hash` instead
    launch_identity: str | None
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    stream: int
    args: list[bytes]       #: one per parameter, as the app passed it
    ordinal: int            #: this kernel's launch count in the process, 0-based
    #: version-1 records only: format 1's dynamic hash of the launch (no shared memory)
    dynamic_hash: str | None = None

    @property
    def identity(self) -> str:
        """The launch's canonical identity: `launch_identity`; for a version-1 record
        written before it, format 1's dynamic hash (what such a record is named by)."""
        return self.launch_identity if self.launch_identity is not None else self.dynamic_hash


@dataclass
class VaRange:
    """The address range the recording served device allocations from (`va_range`)."""
    base: int
    size: int

    def contains(self, address: int, size: int) -> bool:
        """Whether the `size` bytes at `address` lie inside the range."""
        return self.base <= address and address + size <= self.base + self.size


@dataclass
class Region:
    """An allocation or a global; `prologue`/`epilogue` are chunk names (None when the
    region was not snapshotted)."""
    index: int              #: position in `Record.regions` (allocations first, then globals)
    address: int
    size: int
    prologue: list[str] | None
    epilogue: list[str] | None
    kind: str = ""          #: allocations: "device", "managed" or "host-pinned"; "global" for globals
    name: str = ""          #: globals: the variable's name
    in_va_range: bool = False
    #: allocations (format 3): the app's annotation (kir/record.h): {dtype, kind abs|rel|ulp,
    #: threshold, norm, tag}, or None
    tolerance: dict | None = None

    @property
    def is_global(self) -> bool:
        """A module global, not an allocation."""
        return self.kind == "global"

    @property
    def snapshotted(self) -> bool:
        """Both its prologue and its epilogue were stored."""
        return self.prologue is not None and self.epilogue is not None

    @property
    def label(self) -> str:
        """How messages name the region."""
        if self.is_global:
            return f"global {self.name}"
        return f"{self.kind} allocation at {self.address:#x}"


@dataclass
class Flag:
    """A reason the launch may not replay faithfully (docs/record-format.md, "Flags") and
    what the recorder saw."""
    flag: str
    detail: str


@dataclass
class Stats:
    """What the recorder measured: bytes snapshotted and stored, and the seconds spent
    (the record's `stats`; docs/record-format.md says each)."""
    prologue_bytes: int = 0
    prologue_seconds: float = 0.0
    epilogue_bytes: int = 0
    epilogue_seconds: float = 0.0
    stored_bytes: int = 0
    store_seconds: float = 0.0  # storing snapshots held on the device, after the app moved on
    # The writer's profile (issue 15; records from kir before it: 0): seconds summed
    # over the writer's threads hashing, compressing and writing chunks; waiting for
    # device-to-host copies; making the chunks durable before the record is written.
    store_hash_seconds: float = 0.0
    store_compress_seconds: float = 0.0
    store_write_seconds: float = 0.0
    copy_wait_seconds: float = 0.0
    sync_seconds: float = 0.0


# --- files --------------------------------------------------------------------------------

def read_chunk(path: Path, name: str, max_raw: int = MAX_CHUNK_BYTES) -> bytes:
    """The raw bytes of chunk `name` stored in `path`, checked as the spec says; a chunk
    announcing more than `max_raw` decoded bytes is refused before it is decoded."""
    where = f"{path}: chunk {name}"
    layout = CHUNK_LAYOUT
    data, h = _read_file_header(path, where, layout, "chunk", "stored_size", MAX_CHUNK_BYTES)
    header_hash = f"{h['hash_high']:016x}{h['hash_low']:016x}"
    if header_hash != name:
        raise RecordError(f"{where}: byte {layout.offset['hash_high']}: header says hash {header_hash}, "
                          f"the file name says {name}")
    limit = min(max_raw, MAX_CHUNK_BYTES)
    if h["raw_size"] > limit:
        raise RecordError(f"{where}: byte {layout.offset['raw_size']}: raw size {h['raw_size']} is more than "
                          f"the {limit} bytes this chunk can hold")
    raw = _decode(where, h["codec"], data[layout.size:], h["raw_size"])
    if len(raw) != h["raw_size"]:
        raise RecordError(f"{where}: decoded {len(raw)} bytes, header (byte {layout.offset['raw_size']}) "
                          f"says {h['raw_size']}")
    digest = str(_core.xxh3_128(raw))
    if digest != name:
        raise RecordError(f"{where}: hash of the decoded bytes is {digest}, not {name}")
    return raw


def _decode(where: str, codec: int, payload: bytes, raw_size: int) -> bytes:
    name = CODECS.get(codec)
    if name == "raw":
        return payload
    if name != "zstd":
        known = ", ".join(f"{i} {n}" for i, n in sorted(CODECS.items()))
        raise RecordError(f"{where}: byte {CHUNK_LAYOUT.offset['codec']}: unknown codec {codec} (known: {known})")
    try:
        return _core.zstd_decompress(payload, raw_size, MAX_CHUNK_BYTES)
    except KirError as error:
        raise RecordError(f"{where}: zstd payload does not decode: {error}") from None


def _check_magic(where: str, layout: HeaderLayout, found: bytes, what: str) -> None:
    if found != layout.magic:
        raise RecordError(f"{where}: byte {layout.offset['magic']}: not a kir {what} "
                          f"(magic {found!r}, expected {layout.magic!r})")


def _check_version(where: str, layout: HeaderLayout, version: int) -> None:
    if version not in VERSIONS:
        known = ", ".join(map(str, VERSIONS))
        raise RecordError(f"{where}: byte {layout.offset['version']}: format version {version} is not "
                          f"supported (this reader knows version {known})")


def _check_size(where: str, actual: int, expected: int) -> None:
    if actual < expected:
        raise RecordError(f"{where}: truncated: {actual} bytes, header says {expected}")
    if actual > expected:
        raise RecordError(f"{where}: {actual - expected} bytes of trailing data: "
                          f"{actual} bytes, header says {expected}")


def _read_file_header(path: Path, where: str, layout, what: str, size_field: str, cap: int):
    """A chunk or record file's bytes and header fields: the file opened without
    blocking and refused unless regular (kir.files), its header read, magic, version
    and total size (header + the `size_field` bytes it announces, at most `cap`)
    checked against the file's size before the rest is read."""
    fd, size = open_regular(path, where, RecordError)
    try:
        if size < layout.size:
            raise RecordError(f"{where}: truncated: {size} bytes, a {what} header is {layout.size}")
        head = read_exactly(fd, 0, layout.size, where, RecordError)
        h = layout.unpack(head)
        _check_magic(where, layout, h["magic"], what)
        _check_version(where, layout, h["version"])
        if h[size_field] > cap:
            raise RecordError(f"{where}: byte {layout.offset[size_field]}: {size_field} {h[size_field]} is more "
                              f"than the cap of {cap} bytes")
        _check_size(where, size, layout.size + h[size_field])
        data = head + read_exactly(fd, layout.size, h[size_field], where, RecordError)
    finally:
        os.close(fd)
    return data, h


def read_record_body(path: Path) -> dict:
    """The metadata map of a record file, after checking its header and checksum."""
    return _read_record(path)[1]


def _read_record(path: Path) -> tuple[int, dict]:
    """(the header's format version, the metadata map) of a record file, checked."""
    where = str(path)
    layout = RECORD_LAYOUT
    data, h = _read_file_header(path, where, layout, "record", "body_size", MAX_RECORD_BYTES - layout.size)
    body = data[layout.size:]
    header_hash, digest = f"{h['hash_high']:016x}{h['hash_low']:016x}", str(_core.xxh3_128(body))
    if digest != header_hash:
        raise RecordError(f"{where}: checksum of the body is {digest}, header (byte "
                          f"{layout.offset['hash_high']}) says {header_hash}")
    return h["version"], _unpack(where, body)


def _unpack(where: str, body: bytes) -> dict:
    import msgpack
    try:  # what decoding would cost, known before anything is built
        _core.measure_msgpack(body, min(len(body) // 3 + 65536, MAX_METADATA_VALUES), MAX_METADATA_DEPTH,
                              RECORD_LAYOUT.size)
    except KirError as error:
        raise RecordError(f"{where}: byte {RECORD_LAYOUT.size}: the body is not a msgpack value kir reads: "
                          f"{error}") from None
    try:
        meta = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as error:  # msgpack raises several types (ExtraData, ValueError, ...)
        raise RecordError(f"{where}: byte {RECORD_LAYOUT.size}: the body is not a msgpack "
                          f"value: {error}") from None
    if not isinstance(meta, dict):
        raise RecordError(f"{where}: the body is a msgpack {type(meta).__name__}, not a map")
    return meta


# --- decoding the metadata --------------------------------------------------------------

class _Fields:
    """Typed access to a metadata map: a missing key or a wrong type is a RecordError
    naming the key's path ('kernel.params[2].size')."""

    def __init__(self, where: str, value: dict, path: str = "") -> None:
        self.where, self.value, self.path = where, value, path

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, types, optional: bool = False):
        if key not in self.value:
            self.fail(f"metadata has no '{self.key_path(key)}'")
        item = self.value[key]
        if item is None and optional:
            return None
        if not isinstance(item, types) or (isinstance(item, bool) and bool not in _tuple(types)):
            self.fail(f"metadata '{self.key_path(key)}' is {_kind(item)}, expected {_names(types)}")
        return item

    def sub(self, key: str, optional: bool = False) -> _Fields | None:
        item = self.get(key, dict, optional)
        return None if item is None else _Fields(self.where, item, self.key_path(key))

    def items(self, key: str) -> list[_Fields]:
        return [self.element(f"{self.key_path(key)}[{i}]", item) for i, item in enumerate(self.get(key, list))]

    def element(self, path: str, item) -> _Fields:
        if not isinstance(item, dict):
            self.fail(f"metadata '{path}' is {_kind(item)}, expected map")
        return _Fields(self.where, item, path)

    def hash(self, key: str) -> str:
        text = self.get(key, str)
        if not HEX32.match(text):
            self.fail(f"metadata '{self.key_path(key)}' is {text!r}, not 32 lowercase hex digits")
        return text

    def dims(self, key: str) -> tuple[int, int, int]:
        value = self.get(key, list)
        if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.fail(f"metadata '{self.key_path(key)}' is {value!r}, expected [x, y, z]")
        if not all(1 <= v <= U32 for v in value):
            self.fail(f"metadata '{self.key_path(key)}' is {value!r}, expected three integers from 1 to {U32}")
        return tuple(value)

    def count(self, key: str, high: int = U64, low: int = 0) -> int:
        """An integer within [low, high] (sizes, offsets, addresses)."""
        value = self.get(key, int)
        if not low <= value <= high:
            self.fail(f"metadata '{self.key_path(key)}' is {value}, expected {low} to {high}")
        return value

    def chunks(self, key: str) -> list[str] | None:
        names = self.get(key, list, optional=True)
        for name in names or []:
            if not isinstance(name, str) or not HEX32.match(name):
                self.fail(f"metadata '{self.key_path(key)}' holds {name!r}, not a chunk name")
        return names

    def fail(self, message: str):
        raise RecordError(f"{self.where}: {message}")


def _kind(item) -> str:
    return "nil" if item is None else "a " + _names(type(item))


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _names(types) -> str:
    return " or ".join({"dict": "map", "list": "list", "str": "string", "bytes": "bin",
                        "int": "integer", "float": "float", "bool": "bool"}.get(t.__name__, t.__name__)
                       for t in _tuple(types))


def _in_version(spec: dict, version: int) -> bool:
    return spec["first"] <= version and (not spec["until"] or version <= spec["until"])


#: What a field a record may lack reads as (one added within version 1, absent from
#: an older record, or one its version does not have): empty.
_EMPTY = {"maps": list, "bins": list, "number": float}


def _read_map(f: _Fields, table: str, version: int):
    """A metadata map of `table`'s fields (kir/record/metadata.hpp) as the record of
    version `version` carries them, each checked for its type and bounds, built into
    its dataclass (_BUILD); unknown keys are ignored."""
    values = {}
    for spec in METADATA_TABLES[table]["fields"]:
        key = spec["key"]
        if not _in_version(spec, version) or (key not in f.value and version < spec["since"]):
            values[key] = _EMPTY.get(spec["type"], lambda: None)()
        elif spec["nullable"] and f.value.get(key, 0) is None:
            values[key] = None
        else:
            values[key] = _value(f, spec, version)
    return _BUILD.get(table, dict)(**values)


def _value(f: _Fields, spec: dict, version: int):
    key, kind = spec["key"], spec["type"]
    if kind == "str":
        return f.get(key, str)
    if kind == "choice":
        text = f.get(key, str)
        if text not in spec["choices"]:
            f.fail(f"metadata '{f.key_path(key)}' is {text!r}, expected one of {', '.join(spec['choices'])}")
        return text
    if kind == "hash":
        return f.hash(key)
    if kind == "sint":
        return f.get(key, int)
    if kind == "uint":
        return f.count(key, spec["high"], spec["low"])
    if kind == "number":
        return f.get(key, (int, float))
    if kind == "boolean":
        return f.get(key, bool)
    if kind == "dims":
        return f.dims(key)
    if kind == "chunks":
        return f.chunks(key)
    if kind == "bins":
        values = f.get(key, list)
        for i, value in enumerate(values):
            if not isinstance(value, bytes):
                f.fail(f"metadata '{f.key_path(key)}[{i}]' is {_kind(value)}, expected bin")
        return list(values)
    if kind == "map":
        return _read_map(f.sub(key), spec["table"], version)
    if kind == "maps":
        items = [_read_map(item, spec["table"], version) for item in f.items(key)]
        if spec["table"] == "param":  # a parameter's ordinal is its place in the list
            items = [Param(i, **values) for i, values in enumerate(items)]
        return items
    raise RuntimeError(f"kir._core.record_format(): field {key!r} of unknown type {kind!r}")


def _write_map(value, table: str, version: int) -> dict:
    """The inverse of _read_map: the metadata map of a dataclass (or dict) of `table`,
    its keys in the table's order, as the writer writes it."""
    out = {}
    for spec in METADATA_TABLES[table]["fields"]:
        key, kind = spec["key"], spec["type"]
        item = value[key] if isinstance(value, dict) else getattr(value, key)
        if not _in_version(spec, version) or (item is None and version < spec["since"]):
            continue
        if item is None:
            out[key] = None
        elif kind == "map":
            out[key] = _write_map(item, spec["table"], version)
        elif kind == "maps":
            out[key] = [_write_map(i, spec["table"], version) for i in item]
        elif kind in ("dims", "chunks", "bins"):
            out[key] = list(item)
        else:
            out[key] = {"uint": int, "number": float}.get(kind, lambda x: x)(item)
    return out


#: The dataclass each table's maps are read into (the rest: dicts).
_BUILD = {
    "process": Process, "device": Device, "code": Code, "param": dict, "kernel": Kernel, "launch": Launch,
    "va_range": VaRange, "flag": Flag, "stats": Stats,
    "ir": lambda **values: Code(kind="ir", arch="", **values),
    "jit_arg": lambda by_value, **values: JitArg(by_value=bool(by_value), **values),
    "allocation": lambda **values: Region(index=-1, **values),  # Record.load numbers the regions
    "global": lambda **values: Region(index=-1, kind="global", **values),
}


# --- records --------------------------------------------------------------------------

@dataclass
class Record:
    """One recorded launch: its metadata as attributes, its memory through
    `prologue()`, `epilogue()` and `chunk()`."""
    path: Path
    version: int
    kir_version: str
    created: float
    process: Process
    device: Device
    kernel: Kernel
    launch: Launch
    chunk_size: int
    va_range: VaRange | None
    allocations: list[Region]
    globals: list[Region]
    flags: list[Flag]
    stats: Stats
    meta: dict = field(repr=False)  #: the whole metadata map, unknown keys included

    @classmethod
    def load(cls, path) -> Record:
        """Read and check a `.kirrec` file (not the chunks it names: `check()` reads those)."""
        path = Path(path)
        version, meta = _read_record(path)
        f = _Fields(str(path), meta)
        if f.get("version", int) != version:
            f.fail(f"metadata 'version' is {meta['version']}, the header (byte {RECORD_LAYOUT.offset['version']}) "
                   f"says {version}")
        values = _read_map(f, FORMAT["metadata"]["root"], version)
        del values["format"]
        record = cls(path=path, meta=meta, **values)
        for index, region in enumerate(record.regions):
            region.index = index
        record._check_layout()
        return record

    @property
    def format(self) -> str:
        """The metadata's `format`: always "kir.record" (checked when loaded)."""
        return METADATA_FORMAT

    def metadata(self) -> dict:
        """The metadata map rebuilt from this record's fields, in the field table's order
        (kir/record/metadata.hpp): msgpack-packed, the body the writer wrote for it."""
        return _write_map(self, FORMAT["metadata"]["root"], self.version)

    # -- memory --

    @property
    def regions(self) -> list[Region]:
        """Allocations, then globals (`Region.index` is the position here)."""
        return self.allocations + self.globals

    @property
    def directory(self) -> Path:
        """The recording the record belongs to."""
        return self.path.parent.parent

    def chunk_path(self, name: str) -> Path:
        return self.directory / "chunks" / f"{name}{CHUNK_SUFFIX}"

    def chunk(self, name: str) -> bytes:
        """The raw bytes of a chunk, checked (magic, version, size, codec, hash, name); a
        chunk the record names may not decode to more than the record says it holds."""
        if not HEX32.match(name):
            raise RecordError(f"{self.path}: {name!r} is not a chunk name")
        return read_chunk(self.chunk_path(name), name, self.chunk_limits().get(name, MAX_CHUNK_BYTES))

    def chunk_limits(self) -> dict[str, int]:
        """The most bytes each chunk the record names can hold: a code chunk its size,
        a memory chunk its part of the region (the last one of a region is shorter)."""
        if getattr(self, "_limits", None) is None:
            limits: dict[str, int] = {}
            for code in (self.kernel.image, self.kernel.ptx, self.kernel.ir):
                if code:
                    limits[code.chunk] = max(limits.get(code.chunk, 0), code.size)
            for region in self.regions:
                for names in (region.prologue or [], region.epilogue or []):
                    for i, name in enumerate(names):
                        part = min(self.chunk_size, region.size - i * self.chunk_size)
                        limits[name] = max(limits.get(name, 0), part)
            self._limits = limits
        return self._limits

    def prologue(self, region: Region | int | str, offset: int = 0, size: int | None = None) -> bytes:
        """The region's bytes before the kernel ran: all of them, or `size` bytes from
        `offset` (only the chunks holding those are read)."""
        return self._snapshot(self.region(region), "prologue", offset, size)

    def epilogue(self, region: Region | int | str, offset: int = 0, size: int | None = None) -> bytes:
        """The region's bytes after the kernel ran (all, or `size` bytes from `offset`)."""
        return self._snapshot(self.region(region), "epilogue", offset, size)

    def changed_ranges(self, region: Region | int | str) -> list[tuple[int, int]]:
        """(offset, length) of the parts the kernel changed: the chunks whose names
        differ between prologue and epilogue, neighbours merged. Reads no chunk."""
        region = self.region(region)
        self._require_snapshot(region, "epilogue")
        ranges: list[tuple[int, int]] = []
        for i, (before, after) in enumerate(zip(region.prologue, region.epilogue)):
            if before == after:
                continue
            offset = i * self.chunk_size
            length = min(self.chunk_size, region.size - offset)
            if ranges and ranges[-1][0] + ranges[-1][1] == offset:
                ranges[-1] = (ranges[-1][0], ranges[-1][1] + length)
            else:
                ranges.append((offset, length))
        return ranges

    def region(self, key: Region | int | str) -> Region:
        """A region by itself, by its index in `regions`, or a global by its name."""
        if isinstance(key, Region):
            return key
        if isinstance(key, int):
            if 0 <= key < len(self.regions):
                return self.regions[key]
            raise RecordError(f"{self.path}: no region #{key} ({len(self.regions)} regions)")
        found = [g for g in self.globals if g.name == key]
        if not found:
            raise RecordError(f"{self.path}: no global named {key!r}")
        return found[0]

    def chunk_names(self) -> set[str]:
        """Every chunk the record names: code and memory."""
        codes = [c for c in (self.kernel.image, self.kernel.ptx, self.kernel.ir, *self.kernel.ptx_units) if c]
        names = {c.chunk for c in codes}
        for region in self.regions:
            names.update(region.prologue or [])
            names.update(region.epilogue or [])
        return names

    def check(self) -> None:
        """Read every chunk the record names — the code and every snapshot a replay
        reads: present, header, size, hash (raises RecordError on the first bad one)."""
        for name in sorted(self.chunk_names()):
            self.chunk(name)

    def code(self, which: str = "image") -> bytes:
        """The bytes of the kernel's `image`, `ptx` or `ir` (checked against its size)."""
        code = getattr(self.kernel, which)
        if code is None:
            raise RecordError(f"{self.path}: the record holds no {which} for {self.kernel.name}")
        data = self.chunk(code.chunk)
        if len(data) != code.size:
            raise RecordError(f"{self.path}: kernel.{which} is {len(data)} bytes, metadata says {code.size}")
        return data

    def ptx_units(self) -> list[bytes]:
        """The PTX of every unit of a device-linked kernel, in link order (checked
        against their sizes); [] when the record holds none."""
        units = []
        for i, code in enumerate(self.kernel.ptx_units):
            data = self.chunk(code.chunk)
            if len(data) != code.size:
                raise RecordError(f"{self.path}: kernel.ptx_units[{i}] is {len(data)} bytes, "
                                  f"metadata says {code.size}")
            units.append(data)
        return units

    @property
    def flag_names(self) -> list[str]:
        return [f.flag for f in self.flags]

    def _snapshot(self, region: Region, which: str, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes [offset, offset + size) of a snapshot, from the chunks that hold them
        and no others; each chunk must hold exactly its part of the region (so a region
        is never larger than its chunks), and a chunk named many times (memory that
        repeats, deduplicated) is read and decoded once."""
        self._require_snapshot(region, which)
        size = region.size - offset if size is None else size
        if offset < 0 or size < 0 or offset + size > region.size:
            raise RecordError(f"{self.path}: {region.label}: {size} bytes at offset {offset} are not in "
                              f"its {region.size} bytes")
        if size == 0:
            return b""
        names, first = getattr(region, which), offset // self.chunk_size
        decoded: dict[str, bytes] = {}
        parts = []
        for i in range(first, (offset + size - 1) // self.chunk_size + 1):
            name = names[i]
            if name not in decoded:
                decoded[name] = self.chunk(name)
            part = min(self.chunk_size, region.size - i * self.chunk_size)
            if len(decoded[name]) != part:
                raise RecordError(f"{self.path}: {region.label}: {which} chunk #{i} ({name}) holds "
                                  f"{len(decoded[name])} bytes, its part of the region is {part}")
            parts.append(decoded[name])
        start = offset - first * self.chunk_size
        if len(parts) == 1:
            return parts[0][start:start + size]
        return b"".join(parts)[start:start + size]

    def _require_snapshot(self, region: Region, which: str) -> None:
        if getattr(region, which) is None:
            raise RecordError(f"{self.path}: {region.label} was not snapshotted (no {which})")

    def _check_layout(self) -> None:
        """Each snapshot has as many chunks as its size needs; one bin per parameter."""
        if self.chunk_size <= 0:
            raise RecordError(f"{self.path}: metadata 'chunk_size' is {self.chunk_size}")
        if self.va_range and self.va_range.base + self.va_range.size > U64 + 1:
            raise RecordError(f"{self.path}: va_range {self.va_range.base:#x} +{self.va_range.size:#x} "
                              "runs past the end of the address space")
        for region in self.regions:
            if region.address + region.size > U64 + 1:
                raise RecordError(f"{self.path}: {region.label}: {region.size} bytes run past the end of "
                                  "the address space")
            count = -(-region.size // self.chunk_size)
            for which in ("prologue", "epilogue"):
                names = getattr(region, which)
                if names is not None and len(names) != count:
                    raise RecordError(f"{self.path}: {region.label}: {which} has {len(names)} chunks, "
                                      f"{region.size} bytes need {count} of {self.chunk_size}")
        args, params = self.launch.args, self.kernel.params
        if args and len(args) != len(params):
            raise RecordError(f"{self.path}: launch has {len(args)} arguments, kernel.params {len(params)}")
        for i, param in enumerate(params):
            if param.offset + param.size > MAX_PARAM_BYTES:
                raise RecordError(f"{self.path}: kernel.params[{i}] ends at byte {param.offset + param.size}, "
                                  f"past the {MAX_PARAM_BYTES}-byte cap on a parameter buffer")


class Recording:
    """A recording directory: its records (sorted by file name) and chunks."""

    def __init__(self, directory) -> None:
        self.directory = Path(directory)
        if not (self.directory / "records").is_dir():
            raise RecordError(f"{self.directory}: not a kir recording (no records/ folder)")

    @property
    def record_paths(self) -> list[Path]:
        return _visible(self.directory / "records", RECORD_SUFFIX)

    @property
    def chunk_paths(self) -> list[Path]:
        return _visible(self.directory / "chunks", CHUNK_SUFFIX)

    def chunk_bytes(self) -> int:
        """Bytes the chunk files take (as stored, headers included)."""
        return sum(p.stat().st_size for p in self.chunk_paths)

    def records(self) -> list[Record]:
        """Every record, loaded (the first bad one raises RecordError)."""
        return [Record.load(p) for p in self.record_paths]

    def __iter__(self):
        return iter(self.records())

    def __len__(self) -> int:
        return len(self.record_paths)


def _visible(folder: Path, suffix: str) -> list[Path]:
    """Finished files: writers' temporary files start with '.'."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffix) and not p.name.startswith("."))


def attach_ir(path, bitcode: bytes) -> Path:
    """Give the record at `path` the kernel's LLVM IR (`kernel.ir`, as the recorder
    stores IR embedded with the kernel): the bitcode goes into the recording's chunk
    store, then the record is rewritten atomically with the new metadata (header and
    checksum as the C++ writer writes them; the old file stays whole until the rename).
    For IR the hook could not see at the launch: an OpenMP region's, found in the
    executable or given to `kir record --ir` (kir.omp.attach_region_ir)."""
    import msgpack
    path = Path(path)
    version, meta = _read_record(path)
    builder = _core.RecordBuilder(str(path.parent.parent))  # stores the chunk; writes no record
    builder.set_ir(bytes(bitcode))
    meta["kernel"]["ir"] = msgpack.unpackb(builder.metadata(), raw=False, strict_map_key=True)["kernel"]["ir"]
    body = msgpack.packb(meta, use_bin_type=True)
    digest = _core.xxh3_128(body)
    header = RECORD_LAYOUT.struct.pack(*(
        {"magic": RECORD_MAGIC, "version": version, "reserved": 0, "body_size": len(body),
         "hash_high": digest.high, "hash_low": digest.low}[name] for name in RECORD_LAYOUT.fields))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # hidden from readers (_visible)
    with open(temporary, "wb") as out:
        out.write(header + body)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    Record.load(path)  # what was written reads back
    return path


# --- recording -------------------------------------------------------------------------

def record_app(command, directory="kir-records", *, kernels: str | None = None, max_per_kernel: int = 4,
               skip: int = 0, ranks=None, reachable: bool = False, va_base: int | None = None,
               va_size: int | None = None, no_va: bool = False, env: dict | None = None) -> tuple[int, Recording]:
    """Run `command` (a list: program and arguments) under the recorder, as
    `kir record` does, with the same options (checked by kir.recorder: a bad one is
    an OptionError before the app runs); returns the app's exit status and the
    recording. `env` adds to this process's environment (e.g. a launcher's rank
    variable)."""
    from kir.app import hooked_environment, library, run_app
    from kir.recorder import recorder_environment
    directory = Path(directory).resolve()
    settings = recorder_environment(directory, kernels=kernels, max_per_kernel=max_per_kernel, skip=skip,
                                    ranks=ranks, reachable=reachable, va_base=va_base, va_size=va_size,
                                    no_va=no_va)
    check_output_directory(directory)
    environment = {**hooked_environment([library("libkir_record.so")]), **(env or {}), **settings}
    status = run_app([str(c) for c in command], environment)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # an app that recorded nothing
    (directory / "records").mkdir(mode=0o700, exist_ok=True)
    return status, Recording(directory)


def check_output_directory(directory: Path) -> None:
    """Refuse (OptionError) a recording directory that exists and is not a directory,
    or is a non-empty directory holding neither chunks/ nor records/ (someone's
    folder): what the recorder checks too, said before the app runs."""
    from kir.errors import OptionError
    if not os.path.lexists(directory):
        return
    if not directory.is_dir():
        raise OptionError(f"{directory}: exists and is not a directory: not a kir recording")
    names = {p.name for p in directory.iterdir()}
    if names and not names & {"chunks", "records"}:
        raise OptionError(f"{directory}: exists and is not a kir recording "
                          "(no chunks/ or records/, and not empty)")
