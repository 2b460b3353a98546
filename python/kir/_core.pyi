"""kir core bindings (libkir)"""

from collections.abc import Callable, Mapping, Sequence
import enum
from typing import overload

import kir.model


abi_version: int = 0

hook_api_version: int = 11

c_abi_version: int = 11

cache_abi_version: int = 3

C_ABI_VERSION: int = 11

CACHE_ABI_VERSION: int = 3

error_codes: dict = ...

def name_table(which: str) -> tuple:
    """
    The names of one kir/model.hpp enum ('image', 'code', 'target', 'allocation', 'arg', 'jit-arg', 'container', 'codec'), in enum order ('arg': ArgType's values 1, 2, ...).
    """

def arg_types() -> tuple:
    """
    Every ArgType as (value, name, size in bytes (0: no fixed size), little-endian struct format or None), in value order.
    """

def target_kind_of(target: str) -> kir.model.TargetKind:
    """
    A target's family: 'sm_90' cuda, 'gfx90a:xnack+' amdgpu, '' none, else host.
    """

def code_kind_of(kind: kir.model.ImageKind) -> kir.model.CodeKind:
    """
    The code kind of an image kind (cubin, ptx, code-object), else unknown.
    """

class Kernel:
    """A kernel (entry point) of a device image."""

    @property
    def name(self) -> str:
        """Mangled name."""

    @property
    def demangled(self) -> str:
        """Demangled C++ name (the name itself when not mangled)."""

    @property
    def params(self) -> list:
        """The parameters' layout (kir.model.Param)."""

    @property
    def param_count(self) -> int: ...

    @property
    def layout(self) -> str:
        """The parameter layout as text: 'offset:size' per parameter."""

    @property
    def param_bytes(self) -> int | None:
        """Total parameter buffer size, if known."""

    @property
    def registers(self) -> int | None:
        """Registers per thread, if recorded."""

    @property
    def shared_bytes(self) -> int | None:
        """Static shared memory, if known."""

    @property
    def frame_bytes(self) -> int | None:
        """Per-thread stack frame, if recorded."""

    @property
    def max_threads(self) -> list[int] | None:
        """__launch_bounds__ block size (x, y, z)."""

    @property
    def required_threads(self) -> list[int] | None:
        """Required block size (x, y, z)."""

    @property
    def cluster_dims(self) -> list[int] | None:
        """__cluster_dims__ (x, y, z)."""

    @property
    def code_bytes(self) -> int:
        """Size of the kernel's machine code."""

    def __repr__(self) -> str: ...

class DeviceGlobal:
    """A global variable of a device image."""

    @property
    def name(self) -> str: ...

    @property
    def section(self) -> str:
        """Cubin section ('' for PTX)."""

    @property
    def size(self) -> int: ...

    def __repr__(self) -> str: ...

class EmbeddedModule:
    """LLVM IR the Proteus pass embedded in device code."""

    @property
    def name(self) -> str:
        """The symbol or section name."""

    @property
    def kernel(self) -> str:
        """HIP per-kernel sections: the mangled kernel."""

    @property
    def md5(self) -> str:
        """HIP: the hex field of the section name."""

    @property
    def hash(self) -> str:
        """HIP: the decimal hash field of the section name."""

    @property
    def bitcode(self) -> bytes: ...

    @property
    def digest(self) -> Hash128:
        """XXH3-128 of the bitcode."""

    def __repr__(self) -> str: ...

class DeviceCode:
    """Kernels, functions and globals of one image."""

    def __init__(self) -> None: ...

    def records(self, kernels: bool = True) -> dict:
        """
        The same content as plain dicts and lists (the `kir inspect --json` form); with kernels=False its "kernels" list is left empty (kernels_json gives it as text).
        """

    def kernels_json(self, links: dict) -> object:
        """
        The kernels' list as `json.dumps(..., separators=(',', ':'))` writes records()'s, each with "ir_module" from `links` (name -> IR module index, else null); None when a name holds a byte outside printable ASCII (json.dumps escapes those: take records() then).
        """

    @property
    def kernels(self) -> list[Kernel]: ...

    def kernel_rows(self) -> list:
        """
        Per kernel: (name, demangled, parameter count, layout ' OFFSET:SIZE...', registers or None, static shared bytes or None).
        """

    @property
    def functions(self) -> list[str]:
        """Defined functions that are not kernels."""

    @property
    def globals(self) -> list[DeviceGlobal]: ...

    @property
    def target(self) -> str:
        """AMDGPU code objects: the target id."""

    @property
    def ir(self) -> list[EmbeddedModule]:
        """LLVM IR embedded by the Proteus pass."""

    @property
    def kind(self) -> kir.model.ImageKind:
        """The kind of image it was decoded from: cubin, ptx or code-object."""

    @property
    def image_digest(self) -> Hash128 | None:
        """XXH3-128 of the decoded image, when decoded with digests=True."""

    @image_digest.setter
    def image_digest(self, arg: Hash128 | None, /) -> None: ...

class KernelCode:
    """What a kernel's static hash covers (kir/hash/kernel_code.hpp)."""

    @property
    def kind(self) -> kir.model.CodeKind:
        """'ir', or the image's kind; 'unknown' without IR or an image digest."""

    @property
    def modules(self) -> list[int]:
        """Indices into DeviceCode.ir (kind 'ir')."""

    @property
    def digests(self) -> list[Hash128]:
        """The MODULE records' digests."""

def kernel_code(code: DeviceCode, kernel: str) -> KernelCode:
    """
    The static-hash policy: which of the image's bytes kernel `kernel` is hashed over.
    """

def kernel_static_hash(code: DeviceCode, kernel: str) -> Hash128 | None:
    """
    The kernel's static hash under the policy (None without IR or an image digest).
    """

def demangle(name: str) -> str:
    """Itanium C++ demangling."""

class KernelPattern:
    """
    A kernel-name pattern (`--kernel REGEX`; kir/support/kernel_pattern.hpp): kir's dialect and engine (no recursion, no backtracking), the rule the hook's clients use in the app.
    """

    def __init__(self, pattern: str) -> None:
        """
        KirError naming the construct and its offset when kir refuses `pattern`.
        """

    @property
    def pattern(self) -> str: ...

    @property
    def program_size(self) -> int:
        """
        The compiled NFA's instructions (at most kir::KernelPattern::kMaxProgram).
        """

    def search(self, text: str) -> bool:
        """Whether `text` contains a match."""

    @overload
    def selects(self, name: str) -> bool:
        """
        Whether the mangled name `name`, or its demangled name, contains a match.
        """

    @overload
    def selects(self, name: str, demangled: str) -> bool:
        """The same, with demangle(name) at hand."""

def fatbin_flag_names(flags: int) -> list[str]:
    """Names of the set bits of a fatbin entry's flags."""

def parse_cubin(data: bytes) -> DeviceCode:
    """Kernels and globals of a cubin given as bytes."""

def cubin_arch(data: bytes) -> str:
    """A cubin's architecture ("sm_90") from its ELF header's e_flags."""

def parse_code_object(data: bytes) -> DeviceCode:
    """
    Kernels, target id and embedded IR of an AMDGPU code object given as bytes.
    """

def parse_ptx(data: bytes) -> DeviceCode:
    """Kernels and globals of PTX text given as bytes."""

class FatbinEntry:
    """One device image's header; a view into the file."""

    @property
    def index(self) -> int: ...

    @property
    def offset(self) -> int:
        """Offset from the container start."""

    @property
    def kind(self) -> int:
        """1 PTX, 2 cubin, 4 old cubin, 8 LTO-IR."""

    @property
    def image_kind(self) -> kir.model.ImageKind:
        """The kind as an ImageKind ('unknown' for kinds kir does not know)."""

    @property
    def format_version(self) -> int: ...

    @property
    def header_size(self) -> int: ...

    @property
    def payload_size(self) -> int:
        """Padded payload size."""

    @property
    def compressed_size(self) -> int: ...

    @property
    def uncompressed_size(self) -> int: ...

    @property
    def options_offset(self) -> int: ...

    @property
    def major(self) -> int: ...

    @property
    def minor(self) -> int: ...

    @property
    def sm(self) -> int:
        """The header's raw SM number (90 for sm_90)."""

    @property
    def arch(self) -> str:
        """
        The target as everywhere else in kir: 'sm_90' (the raw number is `sm`).
        """

    @property
    def flags(self) -> int: ...

    @property
    def flag_names(self) -> list[str]: ...

    @property
    def obfuscation_key(self) -> int: ...

    @property
    def obfuscated(self) -> bool: ...

    @property
    def compression(self) -> kir.model.Codec:
        """'none', 'lz4', 'zstd' or 'unknown'."""

    @property
    def identifier(self) -> str: ...

    @property
    def options(self) -> bytes:
        """Raw options text (binary on sm_100+ cubins)."""

    @property
    def payload_file_offset(self) -> int: ...

    @property
    def stored_size(self) -> int:
        """Bytes stored (the compressed size when compressed)."""

    @property
    def image_size(self) -> int:
        """Bytes once decompressed."""

    def read(self) -> bytes:
        """The image bytes, decompressed."""

class FatbinWrapper:
    """A __fatBinC_Wrapper_t from .nvFatBinSegment (or .hipFatBinSegment)."""

    @property
    def member(self) -> str: ...

    @property
    def hip(self) -> bool:
        """True for HIP's wrappers (magic HIPF)."""

    @property
    def file_offset(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def container_offset(self) -> int | None: ...

    @property
    def prelinked_offsets(self) -> list[int]: ...

class Image:
    """A device image or embedded module; a view into the file."""

    @property
    def index(self) -> int:
        """Position in its container."""

    @property
    def kind(self) -> kir.model.ImageKind:
        """
        'cubin', 'ptx', 'lto-ir', 'old-cubin', 'code-object', 'bitcode', 'host', ...
        """

    @property
    def target(self) -> str:
        """'sm_90', 'gfx90a:xnack+', or ''."""

    @property
    def target_kind(self) -> kir.model.TargetKind:
        """The target's family."""

    @property
    def triple(self) -> str: ...

    @property
    def id(self) -> str:
        """Bundle entry id, or the fatbin entry's identifier."""

    @property
    def compression(self) -> kir.model.Codec:
        """'none', 'lz4', 'zstd' or 'unknown'."""

    @property
    def file_offset(self) -> int | None:
        """
        Offset of the stored bytes in the file (None when they are not in it as is).
        """

    @property
    def stored_size(self) -> int: ...

    @property
    def size(self) -> int:
        """Bytes once decoded."""

    @property
    def fatbin(self) -> FatbinEntry | None:
        """CUDA: the fatbin entry's header fields, else None."""

    @property
    def strings(self) -> dict:
        """
        An offloading binary entry's string map; `command` for -fembed-bitcode modules.
        """

    def read(self) -> bytes:
        """The image bytes, decoded."""

class Container:
    """A container of images and where it was found."""

    @property
    def member(self) -> str:
        """Archive member ('' outside archives)."""

    @property
    def section(self) -> str: ...

    @property
    def file_offset(self) -> int: ...

    @property
    def found_by(self) -> str:
        """'section', 'wrapper' or 'scan'."""

    @property
    def format(self) -> kir.model.ContainerFormat:
        """
        'cuda-fatbin', 'offload-bundle', 'object-bundle', 'offload-binary', 'bitcode-section' or 'device-elf'.
        """

    @property
    def wrapper(self) -> int | None:
        """Index of the wrapper pointing here."""

    @property
    def version(self) -> int: ...

    @property
    def size(self) -> int:
        """Bytes in the file."""

    @property
    def compression(self) -> str:
        """A compressed bundle's codec, else ''."""

    @property
    def images(self) -> list[Image]: ...

class Binary:
    """Every device-code container of one file."""

    @staticmethod
    def open(path: str, scan: bool = False, scan_data: bool = True) -> Binary:
        """
        Open and index `path`. scan: also find containers of every format by magic in every section. scan_data: also find CUDA fatbins by magic in an ELF's data sections (.rodata, .data, .ldata, ...), where libraries such as cuFFT embed them.
        """

    @property
    def path(self) -> str: ...

    @property
    def format(self) -> str:
        """'elf', 'archive', 'fatbin' or 'offload-bundle'."""

    @property
    def members(self) -> list[str]: ...

    @property
    def containers(self) -> list[Container]: ...

    @property
    def wrappers(self) -> list[FatbinWrapper]: ...

    def container_records(self) -> list:
        """
        Every container as a dict of the kir.inspect/3 JSON schema (docs/json-schema.md), in file order.
        """

    def image_records(self) -> list:
        """
        Every image as a dict of the kir.inspect/3 JSON schema (docs/json-schema.md), in file order.
        """

    def image_records_json(self, indices: object | None = None) -> object:
        """
        image_records()'s dicts (those of `indices`, else all) with each one's "target", as the JSON text json.dumps(..., separators=(',', ':')) writes; None when a text needs json.dumps's escaping.
        """

    def container_records_json(self, indices: object | None = None) -> object:
        """
        container_records()'s dicts (those of `indices`, else all) as the JSON text json.dumps(..., separators=(',', ':')) writes; None when a text needs json.dumps's escaping.
        """

    def image_rows(self) -> list:
        """
        Every image as a tuple (index, container, kind, arch, fatbin version 'MAJOR.MINOR' or None, compression, stored size, size, id, obfuscated), in file order: the text table's fields.
        """

    def device_code(self, container: int, entry: int) -> DeviceCode: ...

    def device_code_of(self, images: Sequence[tuple[int, int]], threads: int = 0, progress: Callable[[int, int], None] | None = None, digests: bool = False) -> list:
        """
        Device code of each (container, entry) in `images`, decoded in parallel, in that order; an image that fails gives its error message (str) instead. `digests` also records each decoded image's XXH3-128.
        """

class ElfFile:
    """kir's ELF64 reader over a mapped file."""

    @staticmethod
    def open(path: str) -> ElfFile: ...

    @staticmethod
    def from_bytes(data: bytes) -> ElfFile:
        """An ELF image in memory (a decoded cubin), copied."""

    @property
    def type(self) -> int: ...

    @property
    def machine(self) -> int: ...

    def sections(self) -> list:
        """
        (index, name, type, flags, addr, offset, size, link, info, addralign, entsize) tuples.
        """

    def segments(self) -> list:
        """(type, flags, offset, vaddr, filesz, memsz) tuples."""

    def symbols(self, dynamic: bool = False) -> list:
        """(name, value, size, type, binding, other, section) tuples."""

class Hash128:
    """
    A 128-bit kir hash; str() gives its 32 hex digits, which it equals and hashes as.
    """

    def __init__(self) -> None: ...

    @property
    def high(self) -> int: ...

    @high.setter
    def high(self, arg: int, /) -> None: ...

    @property
    def low(self) -> int: ...

    @low.setter
    def low(self, arg: int, /) -> None: ...

    @property
    def hex(self) -> str:
        """32 lowercase hex digits, high half first."""

    @staticmethod
    def from_hex(text: str) -> Hash128:
        """Parse exactly 32 lowercase hex digits (ValueError otherwise)."""

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

    @overload
    def __eq__(self, arg: Hash128, /) -> bool: ...

    @overload
    def __eq__(self, arg: str, /) -> bool: ...

    @overload
    def __eq__(self, other: object | None) -> object: ...

    def __hash__(self) -> int: ...

def xxh3_128(data: bytes) -> Hash128:
    """XXH3-128 (seed 0) of bytes, by the system xxhash library."""

def static_hash(name: str, code_kind: str, modules: Sequence[bytes]) -> Hash128:
    """
    The static hash of a kernel: its mangled name, the kind of code ('ir', 'cubin', 'ptx', 'code-object') and the code's bytes (IR modules in any order, or one image).
    """

def static_hash_of_digests(name: str, code_kind: str, digests: Sequence[Hash128]) -> Hash128:
    """
    static_hash() from the modules' xxh3_128 digests: hash each module once for many kernels.
    """

def proteus_static_hash(name: str, modules: Sequence[bytes], llvm20_or_newer: bool = True) -> int:
    """
    Proteus's 64-bit static hash of a CUDA kernel whose binary's modules, in registration order, are `modules`.
    """

def proteus_hash(data: bytes, llvm20_or_newer: bool = True) -> int:
    """Proteus's hashValue of bytes: XXH3-64, or FNV-1a before LLVM 20."""

def proteus_hash_combine(a: int, b: int, llvm20_or_newer: bool = True) -> int:
    """Proteus's hashCombine(a, b)."""

def proteus_cuda_module_hash(modules: Sequence[bytes], llvm20_or_newer: bool = True) -> int | None:
    """
    Proteus's CUDA module hash: the fold of each module's hash, registration order (None for none).
    """

def proteus_hip_module_hash(code: DeviceCode, llvm20_or_newer: bool = True) -> int | None:
    """
    Proteus's HIP module hash of a code object: the fold of its .jit.bitcode* sections' name suffixes, section order (None without such a section).
    """

def proteus_static_hash_of_module(name: str, module_hash: int, llvm20_or_newer: bool = True) -> int:
    """Proteus's createStaticHash: hashCombine(hash(name), module_hash)."""

def fnv1a_64(data: bytes) -> int: ...

class OmpRegionName:
    """
    The parts of an OpenMP target region's kernel name, __omp_offloading_<device>_<file>_<parent>_l<line>[_<count>].
    """

    @property
    def device_id(self) -> int:
        """st_dev of the source file (32 bits)"""

    @property
    def file_id(self) -> int:
        """st_ino of the source file (32 bits)"""

    @property
    def parent(self) -> str:
        """the mangled name of the enclosing function"""

    @property
    def line(self) -> int: ...

    @property
    def count(self) -> int:
        """0 when the name has no _<count> suffix"""

    @property
    def normalized(self) -> str:
        """
        The name with the device and file ids written as 0: the same in every build.
        """

def parse_omp_region_name(name: str) -> OmpRegionName | None:
    """
    The parts of an OpenMP target region's kernel name; None when `name` is not one.
    """

def zero_omp_region_ids(code: bytes) -> bytes:
    """
    The bytes with the hex digits of every __omp_offloading_<hex>_<hex>_ written as '0'.
    """

def omp_region_identity(normalized_name: str, code_kind: str, code_digest: Hash128) -> Hash128:
    """
    The region identity: XXH3-128 of HEADER('kir.omp-region', 1), NAME, CODE_KIND, MODULE(code_digest).
    """

def omp_region_identity_of_image(kernel: str, image_kind: str, image: bytes) -> Hash128 | None:
    """
    The region identity of a kernel of a device image without IR (its ids zeroed in the image's bytes); None when the kernel is not an OpenMP region.
    """

class HashDomain(enum.Enum):
    """The domain a DynamicHash builds (its HEADER record)."""

    jit_key = 0

    launch_identity = 1

    dynamic_v1 = 2

class DynamicHash:
    """
    Builds a JIT key (default), a launch identity or format 1's dynamic hash: HEADER, static hash and arch, then records in the domain's order.
    """

    @overload
    def __init__(self, domain: HashDomain, static_hash: Hash128, arch: str) -> None: ...

    @overload
    def __init__(self, static_hash: Hash128, arch: str) -> None: ...

    def arg(self, position: int, type: kir.model.ArgType, value: bytes) -> DynamicHash:
        """An ARG record: 1-based position, type, value bytes (little-endian)."""

    def capture(self, lambda_: str, slot: int, offset: int, type: kir.model.ArgType, value: bytes) -> DynamicHash:
        """A CAPTURE record: a lambda's captured runtime constant."""

    def specialize(self, flags: int) -> DynamicHash:
        """The SPECIALIZE record: 1 grid, 2 block, 4 bounds."""

    def grid(self, x: int, y: int, z: int) -> DynamicHash: ...

    def block(self, x: int, y: int, z: int) -> DynamicHash: ...

    def bounds(self, max_threads: int, min_blocks: int) -> DynamicHash: ...

    def shared(self, bytes: int) -> DynamicHash:
        """The SHARED record: dynamic shared memory bytes."""

    def config(self, key: str, value: bytes) -> DynamicHash: ...

    def finish(self) -> Hash128: ...

def jit_key_of_launch(static_hash: Hash128, arch: str, params: Sequence[bytes | None], jit_args: Sequence[tuple[int, int, int, bool, int, int, int]], memory: Mapping[int, bytes], grid: Sequence[int], block: Sequence[int], specialize_grid: bool, specialize_block: bool, shared_bytes: int, bounds: Sequence[int], config: Sequence[tuple[str, bytes]], captures: Sequence[tuple[str, int, int, int, bytes]], param_sizes: Sequence[int] | None = None, values: bool = False) -> object:
    """
    The JIT key through kir_jit_key (the C API): each runtime-constant argument, kir_jit_arg's fields (position, kind, type, by_value, count, count_type, count_position), read from `params` (the launch's argument bytes) and, by pointer, from `memory` ({address: bytes}); KirError with kir_last_error() when kir_jit_key fails. With `values`: (key, [(position, kind, type, from_memory, count, value bytes)]), the values it hashed (kir_jit_key_input.values, ABI 10).
    """

def launch_identity_of(static_hash: Hash128, arch: str, params: Sequence[bytes | None], grid: Sequence[int], block: Sequence[int], shared_bytes: int) -> str:
    """
    The launch identity through kir_launch_identity (the C API): every parameter's bytes (None: left out), grid, block, dynamic shared memory.
    """

class RecordBuilder:
    """
    Writes one launch record (docs/record-format.md) into a recording directory: the C++ writer the in-app recorder uses, fed host bytes.
    """

    def __init__(self, directory: str, chunk_size: int = 4194304, zstd_level: int = 1) -> None: ...

    def set_process(self, pid: int, rank: int) -> None: ...

    def set_device(self, name: str, arch: str, ordinal: int) -> None: ...

    def set_kernel(self, name: str, demangled: str, static_hash: Hash128, offsets: Sequence[int], sizes: Sequence[int]) -> None: ...

    def set_image(self, kind: str, arch: str, data: bytes) -> None: ...

    def set_ptx(self, arch: str, data: bytes) -> None: ...

    def set_ir(self, data: bytes) -> None: ...

    def add_ptx_unit(self, arch: str, data: bytes) -> None: ...

    def set_jit_args(self, args: Sequence[tuple[int, str, int, bool, int, int, int]]) -> None:
        """
        (position, kind, type, by_value, count, count_type, count_position) per argument
        """

    def set_launch(self, api: str, launch_identity: Hash128, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int, stream: int, args: Sequence[bytes], ordinal: int) -> None: ...

    def set_va_range(self, base: int, size: int) -> None: ...

    def add_allocation(self, address: int, size: int, kind: str, in_va_range: bool) -> int:
        """
        Add an allocation; returns its region index (allocations and globals share one index space).
        """

    def add_global(self, name: str, address: int, size: int) -> int:
        """Add a module global; returns its region index."""

    def snapshot(self, region: int, epilogue: bool, data: bytes, offset: int = 0, threads: int = 1) -> None:
        """
        Store a region's contents (before the kernel, or after it with epilogue=True) from byte `offset`.
        """

    def set_tolerance(self, region: int, dtype: str, kind: str, threshold: float, norm: str = 'linf', tag: str = '') -> None:
        """
        The app's annotation of allocation `region` (kir_record_annotate, kir/record.h): how a replay's contents may differ; dtype float16|bfloat16|float32|float64, kind abs|rel|ulp, norm linf|l1|l2.
        """

    def add_flag(self, flag: str, detail: str) -> None: ...

    def metadata(self) -> bytes:
        """The record's metadata as msgpack."""

    def write(self) -> str:
        """Write the .kirrec atomically; returns its path."""

    @property
    def stored_bytes(self) -> int:
        """Bytes this builder's chunk store wrote to disk."""

    @property
    def stored_chunks(self) -> int: ...

def record_format() -> dict:
    """
    The recording format the C++ writer writes (kir/record/format.hpp): version, versions (every one a reader knows), metadata_format, record_suffix, chunk_suffix, record_header and chunk_header (magic, size, fields: (name, offset, size, type) with type 'bytes', 'u32' or 'u64', little-endian), codecs ({id: name}), max_chunk_bytes (the largest chunk a reader accepts and the writer writes), max_metadata_values and max_metadata_depth (a reader's bounds on the msgpack values in a record's metadata and on their nesting), metadata (the metadata's field tables, kir/record/metadata.hpp: root, max_param_bytes, tables: {name: {doc, fields}}).
    """

def reachable_ranges(ranges: Sequence[tuple[int, int]], roots: Sequence[int], contents: Sequence[bytes]) -> list[int]:
    """
    Indices of the (address, size) ranges reachable from `roots` through 8-byte-aligned words of reachable ranges' contents (the recorder's --reachable walk).
    """

def measure_msgpack(data: bytes, max_values: int, max_depth: int, origin: int = 0) -> tuple[int, int, int]:
    """
    (values, depth, size) of the MessagePack value at the start of `data`, walked without building it (KirError, with the offset plus `origin`, past max_values values, containers nested deeper than max_depth, or on bytes that are not MessagePack): what decoding it would cost, known first.
    """

def zstd_decompress(data: bytes, raw_size: int, max_size: int = 1073741824) -> bytes:
    """
    zstd data that must decode to exactly raw_size bytes (KirError otherwise). raw_size is refused before anything is allocated when it exceeds max_size (default 1 GiB) or differs from the frame header's content size.
    """

class Cache:
    """The kernel-object cache under one directory (docs/cache.md)."""

    def __init__(self, directory: str, max_bytes: int = 0, create: bool = True, group: str = '') -> None: ...

    @property
    def directory(self) -> str: ...

    def lookup(self, key: str) -> object:
        """
        The entry of `key` (a dict), or None (a damaged entry is a miss: see last_problem); KirError for a refused directory or entry (docs/cache.md, "Who may write the cache").
        """

    def store(self, key: str, code: bytes, kind: str, arch: str, meta: Sequence[tuple[str, str]]) -> None: ...

    def remove(self, key: str) -> bool: ...

    def evict(self, max_bytes: int) -> int:
        """
        Remove least-recently-used entries until at most max_bytes remain; the count removed.
        """

    def list(self, problems_too: bool = False) -> list:
        """
        Every entry file (dicts: path, key, size, mtime_ns, entry or None, problem, offset, refused); with problems_too also stray files (stale temporaries, misplaced names) and refused directories.
        """

    def stats(self) -> dict: ...

    @property
    def last_problem(self) -> str: ...

def cache_encode_entry(key: str, code: bytes, kind: str, arch: str, meta: Sequence[tuple[str, str]]) -> bytes:
    """The bytes of a cache entry file (docs/cache.md)."""

def cache_parse_entry(data: bytes) -> dict:
    """
    Parse and check a cache entry file's bytes (a KirError subclass: what, with its .offset).
    """

CACHE_FORMAT_VERSION: int = 1
